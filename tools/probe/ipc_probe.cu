// A standalone first look at legacy CUDA IPC on a real GPU, used once to seed
// the simulator's defaults before the Rust backend existed. The committed
// reports come from the Rust backend (`ipc-conformance run --backend cuda`);
// this probe is kept so its observations can be re-checked by hand:
//   nvcc -o ipc_probe ipc_probe.cu -lcuda && ./ipc_probe
// Two processes are forked before any CUDA call (fork after CUDA init is
// undefined) and talk over pipes.
#include <cuda.h>
#include <cuda_runtime.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *role = "main";
static int to_imp[2], to_exp[2];
#define P(...) do { printf("[%s] ", role); printf(__VA_ARGS__); printf("\n"); fflush(stdout); } while (0)

static void wr(int fd, const void *p, size_t n) {
  const char *c = (const char *)p;
  while (n) { ssize_t k = write(fd, c, n); if (k <= 0) exit(3); c += k; n -= (size_t)k; }
}
static void rd(int fd, void *p, size_t n) {
  char *c = (char *)p;
  while (n) { ssize_t k = read(fd, c, n); if (k <= 0) exit(4); c += k; n -= (size_t)k; }
}
static const char *en(cudaError_t e) {
  static char b[8][96]; static int i; i = (i + 1) % 8;
  snprintf(b[i], 96, "%d:%s", (int)e, cudaGetErrorName(e)); return b[i];
}
static const char *cen(CUresult e) {
  static char b[8][96]; static int i; i = (i + 1) % 8;
  const char *n = 0; cuGetErrorName(e, &n);
  snprintf(b[i], 96, "%d:%s", (int)e, n ? n : "?"); return b[i];
}
static void runs(const char *what, const unsigned char *b, size_t n) {
  char out[512]; size_t o = 0, i = 0;
  while (i < n && o < 440) {
    size_t j = i; while (j < n && b[j] == b[i]) j++;
    o += snprintf(out + o, sizeof out - o, "%02x*%zu ", b[i], j - i); i = j;
  }
  out[o] = 0; P("%s: %s", what, out);
}
__global__ void copyk(const unsigned char *s, unsigned char *d, size_t n) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i < n) d[i] = s[i];
}
static cudaError_t devread(const void *src, unsigned char *host, size_t n) {
  unsigned char *d; cudaError_t e = cudaMalloc(&d, n); if (e) return e;
  copyk<<<(unsigned)((n + 255) / 256), 256>>>((const unsigned char *)src, d, n);
  e = cudaDeviceSynchronize(); if (!e) e = cudaMemcpy(host, d, n, cudaMemcpyDeviceToHost);
  cudaFree(d); return e;
}
static void range(const char *what, void *p) {
  CUdeviceptr base = 0; size_t size = 0;
  CUresult r = cuMemGetAddressRange(&base, &size, (CUdeviceptr)p);
  P("range %s: %s base-ptr=%lld size=%zu", what, cen(r), (long long)(base - (CUdeviceptr)p), size);
}
static void diffbytes(const char *what, const cudaIpcMemHandle_t &a, const cudaIpcMemHandle_t &b) {
  char out[400]; size_t o = 0;
  for (int i = 0; i < 64; i++) if (a.reserved[i] != b.reserved[i]) o += snprintf(out + o, sizeof out - o, "%d ", i);
  out[o] = 0; P("%s: differing bytes [%s]", what, out);
}
static void dump(const char *what, const cudaIpcMemHandle_t &h) {
  char out[200]; size_t o = 0;
  for (int i = 0; i < 64; i++) o += snprintf(out + o, sizeof out - o, "%02x", (unsigned char)h.reserved[i]);
  P("%s: %s", what, out);
}
static void sync_to(int fd) { char c = 1; wr(fd, &c, 1); }
static void wait_on(int fd) { char c; rd(fd, &c, 1); }

enum { H_A, H_A2, H_S2, H_S3, H_AINT, H_F, H_G, H_T1, H_H, H_N };

static void exporter() {
  role = "exp";
  cudaSetDevice(0);
  const size_t MB2 = 2u << 20;
  void *A, *s[4], *F, *G, *t1, *t2, *H;
  cudaIpcMemHandle_t h[H_N];
  cudaMalloc(&A, MB2); cudaMemset(A, 0xa1, MB2);
  for (int i = 0; i < 4; i++) { cudaMalloc(&s[i], 1000); cudaMemset(s[i], 0xb1 + i, 1000); }
  for (int i = 0; i < 4; i++) P("small s%d - s0 = %lld", i, (long long)((char *)s[i] - (char *)s[0]));
  P("small s0 - A = %lld", (long long)((char *)s[0] - (char *)A));
  range("A", A); range("A+4096", (char *)A + 4096);
  for (int i = 0; i < 4; i++) { char w[16]; snprintf(w, 16, "s%d", i); range(w, s[i]); }
  { void *big; cudaMalloc(&big, 3u << 20); range("3MiB", big); void *odd; cudaMalloc(&odd, MB2 + 1); range("2MiB+1", odd); }
  P("get A: %s", en(cudaIpcGetMemHandle(&h[H_A], A)));
  P("get A again: %s", en(cudaIpcGetMemHandle(&h[H_A2], A)));
  diffbytes("A vs A again", h[H_A], h[H_A2]);
  dump("handle A", h[H_A]);
  P("get s2: %s", en(cudaIpcGetMemHandle(&h[H_S2], s[2])));
  P("get s3: %s", en(cudaIpcGetMemHandle(&h[H_S3], s[3])));
  diffbytes("s2 vs s3", h[H_S2], h[H_S3]);
  dump("handle s2", h[H_S2]); dump("handle s3", h[H_S3]);
  P("get A+4096: %s", en(cudaIpcGetMemHandle(&h[H_AINT], (char *)A + 4096)));
  diffbytes("A vs A+4096", h[H_A], h[H_AINT]);
  { void *p = 0; P("open own handle: %s", en(cudaIpcOpenMemHandle(&p, h[H_A], cudaIpcMemLazyEnablePeerAccess))); }
  { cudaIpcMemHandle_t x; void *m; cudaMallocManaged(&m, 1 << 20); P("get managed: %s", en(cudaIpcGetMemHandle(&x, m)));
    void *hp; cudaMallocHost(&hp, 1 << 20); P("get pinned host: %s", en(cudaIpcGetMemHandle(&x, hp)));
    void *ap; cudaMallocAsync(&ap, MB2, 0); cudaStreamSynchronize(0); P("get pool(async): %s", en(cudaIpcGetMemHandle(&x, ap)));
    P("get null: %s", en(cudaIpcGetMemHandle(&x, 0)));
    P("get unallocated 0x1000: %s", en(cudaIpcGetMemHandle(&x, (void *)0x1000)));
    P("get freed: "); void *fr; cudaMalloc(&fr, MB2); cudaFree(fr); P("get freed: %s", en(cudaIpcGetMemHandle(&x, fr)));
    cudaGetLastError(); }
  cudaMalloc(&F, MB2); cudaMemset(F, 0xc1, MB2); cudaIpcGetMemHandle(&h[H_F], F); P("free F: %s", en(cudaFree(F)));
  cudaMalloc(&G, MB2); cudaMemset(G, 0xd1, MB2); cudaIpcGetMemHandle(&h[H_G], G);
  cudaMalloc(&t1, 1000); cudaMalloc(&t2, 1000); cudaMemset(t1, 0xe1, 1000); cudaMemset(t2, 0xe2, 1000);
  cudaIpcGetMemHandle(&h[H_T1], t1); P("free t1 (t2 alive): %s", en(cudaFree(t1)));
  cudaMalloc(&H, MB2); cudaMemset(H, 0xf1, MB2); cudaIpcGetMemHandle(&h[H_H], H);
  cudaDeviceSynchronize();
  wr(to_imp[1], h, sizeof h);
  wait_on(to_exp[0]);  // importer opened G
  P("free G while importer has it open: %s", en(cudaFree(G)));
  sync_to(to_imp[1]);
  wait_on(to_exp[0]);  // importer asks us to exit
  P("exporter exiting");
  exit(0);
}

static void importer() {
  role = "imp";
  cudaSetDevice(0);
  cudaIpcMemHandle_t h[H_N];
  rd(to_imp[0], h, sizeof h);
  unsigned char buf[8192];
  void *p1 = 0, *p2 = 0;
  P("open A: %s", en(cudaIpcOpenMemHandle(&p1, h[H_A], 1)));
  // Each open in its own statement: printf's argument order is unspecified,
  // and an earlier version compared before the open had run.
  { cudaError_t e2 = cudaIpcOpenMemHandle(&p2, h[H_A], 1); P("open A again: %s same=%d", en(e2), p1 == p2); }
  P("read p1: %s", en(cudaMemcpy(buf, p1, 16, cudaMemcpyDeviceToHost))); runs("p1 bytes", buf, 16);
  { cudaPointerAttributes at; cudaError_t e = cudaPointerGetAttributes(&at, p1); P("attrs p1: %s type=%d device=%d", en(e), (int)at.type, at.device); }
  range("p1", p1);
  P("close p1: %s", en(cudaIpcCloseMemHandle(p1)));
  P("read p2 after one close: %s", en(cudaMemcpy(buf, p2, 16, cudaMemcpyDeviceToHost))); runs("bytes", buf, 16);
  P("close p2: %s", en(cudaIpcCloseMemHandle(p2)));
  P("close p2 again: %s", en(cudaIpcCloseMemHandle(p2)));
  P("read after last close: %s", en(cudaMemcpy(buf, p2, 16, cudaMemcpyDeviceToHost)));
  cudaGetLastError();
  for (unsigned f = 0; f < 4; f++) {
    void *q = 0; cudaError_t e = cudaIpcOpenMemHandle(&q, h[H_A], f);
    P("open A flags=%u: %s", f, en(e)); if (!e) cudaIpcCloseMemHandle(q);
  }
  { void *q = 0; cudaError_t e = cudaIpcOpenMemHandle(&q, h[H_A], 0x80000000u); P("open A flags=0x80000000: %s", en(e)); if (!e) cudaIpcCloseMemHandle(q); }
  { cudaIpcMemHandle_t z; memset(&z, 0, sizeof z); void *q = 0; P("open zero handle: %s", en(cudaIpcOpenMemHandle(&q, z, 1)));
    for (int i = 0; i < 64; i++) z.reserved[i] = (char)(i * 37 + 11);
    P("open garbage handle: %s", en(cudaIpcOpenMemHandle(&q, z, 1))); cudaGetLastError(); }
  {
    char out[2048]; size_t o = 0;
    for (int i = 0; i < 64; i++) {
      cudaIpcMemHandle_t x = h[H_A]; x.reserved[i] ^= (char)0xff; void *q = 0;
      cudaError_t e = cudaIpcOpenMemHandle(&q, x, 1);
      o += snprintf(out + o, sizeof out - o, "%d=%d ", i, (int)e);
      if (!e) cudaIpcCloseMemHandle(q);
      cudaGetLastError();
    }
    out[o] = 0; P("flip byte i -> code: %s", out);
  }
  void *q2 = 0, *q3 = 0;
  P("open s2: %s", en(cudaIpcOpenMemHandle(&q2, h[H_S2], 1)));
  range("q2", q2);
  P("memcpy q2 1000: %s", en(cudaMemcpy(buf, q2, 1000, cudaMemcpyDeviceToHost))); runs("q2[0..1000]", buf, 1000);
  cudaError_t e = cudaMemcpy(buf, q2, 4096, cudaMemcpyDeviceToHost); P("memcpy q2 4096 (past own end): %s", en(e));
  if (!e) runs("q2[0..4096] memcpy", buf, 4096);
  cudaGetLastError();
  e = devread(q2, buf, 4096); P("devread q2 4096: %s", en(e)); if (!e) runs("q2[0..4096] kernel", buf, 4096);
  e = devread((char *)q2 - 2048, buf, 2048); P("devread q2-2048 2048: %s", en(e)); if (!e) runs("q2[-2048..0] kernel", buf, 2048);
  P("open s3: %s", en(cudaIpcOpenMemHandle(&q3, h[H_S3], 1)));
  P("q3 - q2 = %lld", (long long)((char *)q3 - (char *)q2));
  range("q3", q3);
  void *p3 = 0, *r = 0;
  P("open A (p3): %s", en(cudaIpcOpenMemHandle(&p3, h[H_A], 1)));
  { cudaError_t e2 = cudaIpcOpenMemHandle(&r, h[H_AINT], 1); P("open A+4096: %s r-p3=%lld", en(e2), (long long)((char *)r - (char *)p3)); }
  { void *f = 0; P("open freed F: %s", en(cudaIpcOpenMemHandle(&f, h[H_F], 1))); cudaGetLastError(); }
  { void *t = 0; cudaError_t e2 = cudaIpcOpenMemHandle(&t, h[H_T1], 1); P("open freed t1 (t2 alive): %s", en(e2));
    if (!e2) { cudaMemcpy(buf, t, 16, cudaMemcpyDeviceToHost); runs("t1 bytes", buf, 16); cudaIpcCloseMemHandle(t); } cudaGetLastError(); }
  // second context on the same device
  {
    CUcontext prim, c2; CUdevice dev; cuCtxGetCurrent(&prim); cuDeviceGet(&dev, 0);
#if CUDA_VERSION >= 13000
    CUresult cr = cuCtxCreate(&c2, NULL, 0, dev);
#else
    CUresult cr = cuCtxCreate(&c2, 0, dev);
#endif
    P("cuCtxCreate: %s", cen(cr));
    CUdeviceptr d = 0; CUipcMemHandle ch; memcpy(&ch, &h[H_A], 64);
    CUresult o1 = cuIpcOpenMemHandle(&d, ch, 1); P("ctx2 open A (A open in primary): %s", cen(o1)); if (!o1) cuIpcCloseMemHandle(d);
    memcpy(&ch, &h[H_H], 64);
    o1 = cuIpcOpenMemHandle(&d, ch, 1); P("ctx2 open H (never opened): %s", cen(o1));
    if (!o1) { cuCtxSetCurrent(prim); void *hp = 0; P("primary open H after ctx2 opened it: %s", en(cudaIpcOpenMemHandle(&hp, h[H_H], 1)));
      if (hp) cudaIpcCloseMemHandle(hp); cuCtxSetCurrent(c2); cuIpcCloseMemHandle(d); }
    cuCtxSetCurrent(prim); cuCtxDestroy(c2); cudaGetLastError();
  }
  // cudaFree on an IPC pointer
  { void *p4 = 0; cudaIpcOpenMemHandle(&p4, h[H_G], 1);
    P("cudaFree(ipc ptr of G): %s", en(cudaFree(p4))); cudaGetLastError();
    P("read after cudaFree(ipc): %s", en(cudaMemcpy(buf, p4, 16, cudaMemcpyDeviceToHost))); cudaGetLastError();
    P("close after cudaFree(ipc): %s", en(cudaIpcCloseMemHandle(p4))); cudaGetLastError(); }
  // free while open
  void *g = 0;
  P("open G: %s", en(cudaIpcOpenMemHandle(&g, h[H_G], 1)));
  sync_to(to_exp[1]); wait_on(to_imp[0]);
  e = cudaMemcpy(buf, g, 16, cudaMemcpyDeviceToHost); P("read G after exporter free: %s", en(e)); if (!e) runs("G bytes", buf, 16);
  e = devread(g, buf, 16); P("devread G after exporter free: %s", en(e)); if (!e) runs("G kernel bytes", buf, 16);
  cudaGetLastError();
  P("close G: %s", en(cudaIpcCloseMemHandle(g))); cudaGetLastError();
  // exporter exit
  sync_to(to_exp[1]);
  sleep(2);
  e = cudaMemcpy(buf, p3, 16, cudaMemcpyDeviceToHost); P("read A (open) after exporter exit: %s", en(e)); if (!e) runs("A bytes", buf, 16);
  { void *hh = 0; P("open H after exporter exit: %s", en(cudaIpcOpenMemHandle(&hh, h[H_H], 1))); cudaGetLastError(); }
  { void *again = 0; cudaError_t e2 = cudaIpcOpenMemHandle(&again, h[H_A], 1); P("re-open A after exporter exit (still open here): %s same=%d", en(e2), again == p3); cudaGetLastError(); }
  P("close p3: %s", en(cudaIpcCloseMemHandle(p3)));
  P("close r: %s", en(cudaIpcCloseMemHandle(r)));
  P("close q2: %s", en(cudaIpcCloseMemHandle(q2)));
  P("close q3: %s", en(cudaIpcCloseMemHandle(q3)));
  { cudaIpcMemHandle_t x; P("get with null out (last): "); fflush(stdout); P("=> %s", en(cudaIpcGetMemHandle(NULL, p3))); }
  { void *a; cudaMalloc(&a, 1 << 20); cudaIpcMemHandle_t x; cudaIpcGetMemHandle(&x, a);
    P("open with null out: %s", en(cudaIpcOpenMemHandle(NULL, h[H_A], 1))); }
  exit(0);
}

int main() {
  if (pipe(to_imp) || pipe(to_exp)) return 1;
  pid_t e = fork();
  if (e == 0) exporter();
  pid_t i = fork();
  if (i == 0) importer();
  int st;
  waitpid(i, &st, 0); printf("importer status=%d sig=%d\n", WIFEXITED(st) ? WEXITSTATUS(st) : -1, WIFSIGNALED(st) ? WTERMSIG(st) : 0);
  waitpid(e, &st, 0); printf("exporter status=%d sig=%d\n", WIFEXITED(st) ? WEXITSTATUS(st) : -1, WIFSIGNALED(st) ? WTERMSIG(st) : 0);
  return 0;
}
