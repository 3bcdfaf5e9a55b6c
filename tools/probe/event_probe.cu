// A standalone first look at CUDA interprocess events on a real GPU, used
// once to seed the simulator's event defaults (the committed reports come from
// the Rust backend). Re-check by hand:
//   nvcc -o event_probe event_probe.cu -lcuda && ./event_probe
// Every risky call runs in a freshly forked process (fork before any CUDA call).
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static const char *role = "main";
#define P(...) do { printf("[%s] ", role); printf(__VA_ARGS__); printf("\n"); fflush(stdout); } while (0)
static const char *en(cudaError_t e) {
  static char b[8][96]; static int i; i = (i + 1) % 8;
  snprintf(b[i], 96, "%d:%s", (int)e, cudaGetErrorName(e)); return b[i];
}
static const char *cen(CUresult e) {
  static char b[8][96]; static int i; i = (i + 1) % 8;
  const char *n = 0; cuGetErrorName(e, &n);
  snprintf(b[i], 96, "%d:%s", (int)e, n ? n : "?"); return b[i];
}
static double now_ms() { timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e3 + t.tv_nsec / 1e6; }
static void wr(int fd, const void *p, size_t n) { if (write(fd, p, n) != (ssize_t)n) exit(3); }
static void rd(int fd, void *p, size_t n) {
  char *c = (char *)p; while (n) { ssize_t k = read(fd, c, n); if (k <= 0) exit(4); c += k; n -= (size_t)k; }
}
__global__ void spin_fill(unsigned long long ns, unsigned char *p, size_t n, unsigned char v) {
  if (threadIdx.x == 0) {
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); } while (t - t0 < ns);
  }
  __syncthreads();
  for (size_t i = threadIdx.x; i < n; i += blockDim.x) p[i] = v;
}
__global__ void copyk(const unsigned char *s, unsigned char *d, size_t n) {
  for (size_t i = threadIdx.x; i < n; i += blockDim.x) d[i] = s[i];
}
static unsigned char devbyte(void *src) {
  unsigned char *d, h = 0xee; cudaMalloc(&d, 16); copyk<<<1, 32>>>((unsigned char *)src, d, 16);
  cudaError_t e = cudaMemcpy(&h, d, 1, cudaMemcpyDeviceToHost); if (e) P("devbyte: %s", en(e)); cudaFree(d); return h;
}
static void hexh(const char *what, const void *h) {
  const unsigned char *b = (const unsigned char *)h; char s[200]; int o = 0;
  for (int i = 0; i < 64; i++) o += snprintf(s + o, sizeof s - o, "%02x", b[i]); P("%s %s", what, s);
}
template <class F> static void isolated(const char *name, F f) {
  fflush(stdout); pid_t c = fork();
  if (c == 0) { alarm(60); role = name; f(); fflush(stdout); _exit(0); }
  int st; waitpid(c, &st, 0);
  if (WIFSIGNALED(st)) printf("[%s] died by signal %d\n", name, WTERMSIG(st));
  else if (WEXITSTATUS(st)) printf("[%s] exit %d\n", name, WEXITSTATUS(st));
  fflush(stdout);
}

static void single_runtime() {
  cudaSetDevice(0);
  int v = -1; P("attr IpcEventSupport %s = %d", en(cudaDeviceGetAttribute(&v, cudaDevAttrIpcEventSupport, 0)), v);
  unsigned fl[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 0x10, 0x100, 0x80000000u};
  for (unsigned f : fl) {
    cudaEvent_t e = 0; cudaError_t r = cudaEventCreateWithFlags(&e, f);
    cudaIpcEventHandle_t h; cudaError_t g = r ? cudaErrorUnknown : cudaIpcGetEventHandle(&h, e);
    P("create flags=%#x: %s; get handle: %s", f, en(r), r ? "-" : en(g));
    if (!r) cudaEventDestroy(e);
  }
  cudaEvent_t e, e2, t1, t2; cudaEventCreateWithFlags(&e, 6); cudaEventCreateWithFlags(&e2, 6);
  cudaEventCreate(&t1); cudaEventCreate(&t2);
  cudaIpcEventHandle_t h1, h2, h3; cudaIpcGetEventHandle(&h1, e); cudaIpcGetEventHandle(&h2, e); cudaIpcGetEventHandle(&h3, e2);
  P("handle twice same bytes: %d; other event same bytes: %d", !memcmp(&h1, &h2, 64), !memcmp(&h1, &h3, 64));
  hexh("handle", &h1); hexh("handle2", &h3);
  P("query unrecorded ipc event: %s", en(cudaEventQuery(e)));
  P("sync unrecorded ipc event: %s", en(cudaEventSynchronize(e)));
  cudaEvent_t o = 0; P("open own handle: %s", en(cudaIpcOpenEventHandle(&o, h1)));
  cudaEventRecord(t1); cudaEventRecord(e); cudaEventRecord(t2); cudaDeviceSynchronize();
  float ms = -1;
  P("elapsed timing,timing: %s", en(cudaEventElapsedTime(&ms, t1, t2)));
  P("elapsed ipc,ipc: %s", en(cudaEventElapsedTime(&ms, e, e)));
  P("elapsed timing,ipc: %s", en(cudaEventElapsedTime(&ms, t1, e)));
  P("elapsed unrecorded timing: %s", en((cudaEventCreate(&t1), cudaEventElapsedTime(&ms, t1, t2))));
  P("get handle out=NULL: %s", en(cudaIpcGetEventHandle(NULL, e)));
  P("destroy: %s", en(cudaEventDestroy(e)));
}
static void single_driver() {
  cuInit(0); CUdevice d; cuDeviceGet(&d, 0); CUcontext c; cuDevicePrimaryCtxRetain(&c, d); cuCtxSetCurrent(c);
  int v = -1; P("attr IPC_EVENT_SUPPORTED %s = %d", cen(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_IPC_EVENT_SUPPORTED, d)), v);
  unsigned fl[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 0x10, 0x100, 0x80000000u};
  for (unsigned f : fl) {
    CUevent e = 0; CUresult r = cuEventCreate(&e, f);
    CUipcEventHandle h; CUresult g = r ? CUDA_ERROR_UNKNOWN : cuIpcGetEventHandle(&h, e);
    P("create flags=%#x: %s; get handle: %s", f, cen(r), r ? "-" : cen(g));
    if (!r) cuEventDestroy(e);
  }
  CUevent e, t1, t2; cuEventCreate(&e, 6); cuEventCreate(&t1, 0); cuEventCreate(&t2, 0);
  CUipcEventHandle h; cuIpcGetEventHandle(&h, e);
  CUevent o = 0; P("open own handle: %s", cen(cuIpcOpenEventHandle(&o, h)));
  P("query unrecorded: %s", cen(cuEventQuery(e)));
  cuEventRecord(t1, 0); cuEventRecord(e, 0); cuEventRecord(t2, 0); cuCtxSynchronize();
  float ms;
  P("elapsed timing,timing: %s", cen(cuEventElapsedTime(&ms, t1, t2)));
  P("elapsed ipc,ipc: %s", cen(cuEventElapsedTime(&ms, e, e)));
  P("elapsed timing,ipc: %s", cen(cuEventElapsedTime(&ms, t1, e)));
}
static void open_bytes(int driver, int zero) {
  unsigned char b[64]; for (int i = 0; i < 64; i++) b[i] = zero ? 0 : (unsigned char)(i * 37 + 11);
  if (!driver) { cudaSetDevice(0); cudaFree(0); cudaIpcEventHandle_t h; memcpy(&h, b, 64); cudaEvent_t e = 0;
    P("open %s handle: %s", zero ? "zero" : "garbage", en(cudaIpcOpenEventHandle(&e, h))); }
  else { cuInit(0); CUdevice d; cuDeviceGet(&d, 0); CUcontext c; cuDevicePrimaryCtxRetain(&c, d); cuCtxSetCurrent(c);
    CUipcEventHandle h; memcpy(&h, b, 64); CUevent e = 0;
    P("open %s handle: %s", zero ? "zero" : "garbage", cen(cuIpcOpenEventHandle(&e, h))); }
}

// Two processes, runtime API.
static int p2c[2], c2p[2];
static void msg(int fd, char c) { wr(fd, &c, 1); }
static char got(int fd) { char c; rd(fd, &c, 1); return c; }
static void exporter() {
  role = "exporter"; cudaSetDevice(0);
  unsigned char *buf; cudaMalloc(&buf, 2 << 20); cudaMemset(buf, 0, 2 << 20); cudaDeviceSynchronize();
  cudaIpcMemHandle_t mh; cudaIpcGetMemHandle(&mh, buf);
  cudaEvent_t e; P("create: %s", en(cudaEventCreateWithFlags(&e, cudaEventInterprocess | cudaEventDisableTiming)));
  cudaIpcEventHandle_t eh; P("get: %s", en(cudaIpcGetEventHandle(&eh, e)));
  wr(p2c[1], &mh, 64); wr(p2c[1], &eh, 64); got(c2p[0]);
  spin_fill<<<1, 256>>>(500000000ull, buf, 2 << 20, 0x5a);
  P("record after 500 ms work: %s", en(cudaEventRecord(e)));
  P("own query right after: %s", en(cudaEventQuery(e)));
  msg(p2c[1], 'r'); got(c2p[0]);
  // The importer recorded the shared event after its own 300 ms of work.
  P("query after importer's record: %s", en(cudaEventQuery(e)));
  double t = now_ms(); P("sync: %s after %.1f ms", en(cudaEventSynchronize(e)), now_ms() - t);
  P("read after sync: %02x", devbyte(buf));
  msg(p2c[1], 'x'); got(c2p[0]);
  // Wait on stream: record again after work, importer waits in its stream.
  P("destroy: %s", en(cudaEventDestroy(e)));
  msg(p2c[1], 'd'); got(c2p[0]);
  P("exit");
}
static void importer() {
  role = "importer"; cudaSetDevice(0);
  cudaIpcMemHandle_t mh; cudaIpcEventHandle_t eh; rd(p2c[0], &mh, 64); rd(p2c[0], &eh, 64);
  unsigned char *buf; P("open mem: %s", en(cudaIpcOpenMemHandle((void **)&buf, mh, 1)));
  cudaEvent_t e = 0, e2 = 0; P("open event: %s", en(cudaIpcOpenEventHandle(&e, eh)));
  P("open event again: %s same=%d", en(cudaIpcOpenEventHandle(&e2, eh)), e == e2);
  P("query before any record: %s", en(cudaEventQuery(e)));
  msg(c2p[1], 'o'); got(p2c[0]);
  P("query right after exporter's record: %s", en(cudaEventQuery(e)));
  P("query second opened: %s", en(cudaEventQuery(e2)));
  float ms; P("elapsed imported,imported: %s", en(cudaEventElapsedTime(&ms, e, e)));
  double t = now_ms();
  P("stream wait: %s", en(cudaStreamWaitEvent(0, e, 0)));
  unsigned char b = devbyte(buf);
  P("kernel read after stream wait: %02x after %.1f ms", b, now_ms() - t);
  P("query now: %s", en(cudaEventQuery(e)));
  P("sync: %s", en(cudaEventSynchronize(e)));
  // Now the importer records on the shared event after its own work.
  spin_fill<<<1, 256>>>(300000000ull, buf, 2 << 20, 0x6b);
  P("importer record after 300 ms work: %s", en(cudaEventRecord(e)));
  msg(c2p[1], 'r'); got(p2c[0]);
  // Ordering without waiting: a plain kernel read right after the exporter's record.
  msg(c2p[1], 'x'); got(p2c[0]);
  P("after exporter destroy: query %s", en(cudaEventQuery(e)));
  P("after exporter destroy: sync %s", en(cudaEventSynchronize(e)));
  P("after exporter destroy: record %s", en(cudaEventRecord(e)));
  P("after exporter destroy: sync %s", en(cudaEventSynchronize(e)));
  cudaEvent_t e3 = 0; P("after exporter destroy: open handle again %s", en(cudaIpcOpenEventHandle(&e3, eh)));
  P("destroy imported: %s", en(cudaEventDestroy(e)));
  P("destroy second imported: %s", en(cudaEventDestroy(e2)));
  msg(c2p[1], 'd');
  sleep(1);
  cudaEvent_t e4 = 0; P("after exporter exit: open handle %s", en(cudaIpcOpenEventHandle(&e4, eh)));
}
// No wait: does the importer see the old bytes while the exporter's work runs?
static void nowait_exporter() {
  role = "nw-exporter"; cudaSetDevice(0);
  unsigned char *buf; cudaMalloc(&buf, 2 << 20); cudaMemset(buf, 0, 2 << 20); cudaDeviceSynchronize();
  cudaIpcMemHandle_t mh; cudaIpcGetMemHandle(&mh, buf);
  cudaEvent_t e; cudaEventCreateWithFlags(&e, 6); cudaIpcEventHandle_t eh; cudaIpcGetEventHandle(&eh, e);
  wr(p2c[1], &mh, 64); wr(p2c[1], &eh, 64); got(c2p[0]);
  spin_fill<<<1, 256>>>(300000000ull, buf, 2 << 20, 0x5a); cudaEventRecord(e);
  msg(p2c[1], 'r'); got(c2p[0]);
}
static void nowait_importer() {
  role = "nw-importer"; cudaSetDevice(0);
  cudaIpcMemHandle_t mh; cudaIpcEventHandle_t eh; rd(p2c[0], &mh, 64); rd(p2c[0], &eh, 64);
  unsigned char *buf; cudaIpcOpenMemHandle((void **)&buf, mh, 1);
  cudaEvent_t e; cudaIpcOpenEventHandle(&e, eh); msg(c2p[1], 'o'); got(p2c[0]);
  unsigned char h = 0xee; double t = now_ms(); cudaError_t r = cudaMemcpy(&h, buf, 1, cudaMemcpyDeviceToHost);
  P("memcpy read without wait: %s %02x after %.1f ms", en(r), h, now_ms() - t);
  P("kernel read without wait: %02x", devbyte(buf));
  t = now_ms(); P("sync %s after %.1f ms; read %02x", en(cudaEventSynchronize(e)), now_ms() - t, devbyte(buf));
  msg(c2p[1], 'd');
}
template <class A, class B> static void pair(A a, B b) {
  pipe(p2c); pipe(c2p); fflush(stdout);
  pid_t x = fork(); if (x == 0) { alarm(60); a(); fflush(stdout); _exit(0); }
  pid_t y = fork(); if (y == 0) { alarm(60); b(); fflush(stdout); _exit(0); }
  close(p2c[0]); close(p2c[1]); close(c2p[0]); close(c2p[1]);
  int st; waitpid(x, &st, 0); P("exporter status %d", st); waitpid(y, &st, 0); P("importer status %d", st);
}
int main() {
  isolated("single-runtime", single_runtime);
  isolated("single-driver", single_driver);
  isolated("zero-runtime", [] { open_bytes(0, 1); });
  isolated("garbage-runtime", [] { open_bytes(0, 0); });
  isolated("zero-driver", [] { open_bytes(1, 1); });
  isolated("garbage-driver", [] { open_bytes(1, 0); });
  pair(exporter, importer);
  pair(nowait_exporter, nowait_importer);
  return 0;
}
