// Measures VMM shareable-handle behaviour on a real GPU (driver API, plus the
// runtime's cudaIpcGetMemHandle). Exporter and importer are two processes
// forked before CUDA is initialised; the fd travels over a socketpair with
// SCM_RIGHTS. Prints one `key=value` line per observation.
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/wait.h>

static const char *who = "?";
static const char *nm(CUresult r) { const char *s = 0; cuGetErrorName(r, &s); return s ? s : "UNKNOWN"; }
#define R(key, call) do { CUresult r_ = (call); printf("%s.%s=%s(%d)\n", who, key, nm(r_), (int)r_); fflush(stdout); } while (0)
#define RV(key, call, var) do { CUresult r_ = (call); printf("%s.%s=%s(%d) value=%lld\n", who, key, nm(r_), (int)r_, (long long)(var)); fflush(stdout); } while (0)

static void send_fd(int sock, int fd) {
  struct msghdr m = {0}; char b = 'x'; struct iovec io = {&b, 1};
  char c[CMSG_SPACE(sizeof(int))]; memset(c, 0, sizeof c);
  m.msg_iov = &io; m.msg_iovlen = 1; m.msg_control = c; m.msg_controllen = sizeof c;
  struct cmsghdr *h = CMSG_FIRSTHDR(&m); h->cmsg_level = SOL_SOCKET; h->cmsg_type = SCM_RIGHTS;
  h->cmsg_len = CMSG_LEN(sizeof(int)); memcpy(CMSG_DATA(h), &fd, sizeof(int));
  if (sendmsg(sock, &m, 0) != 1) perror("sendmsg");
}
static int recv_fd(int sock) {
  struct msghdr m = {0}; char b; struct iovec io = {&b, 1};
  char c[CMSG_SPACE(sizeof(int))]; m.msg_iov = &io; m.msg_iovlen = 1; m.msg_control = c; m.msg_controllen = sizeof c;
  if (recvmsg(sock, &m, 0) != 1) { perror("recvmsg"); return -1; }
  struct cmsghdr *h = CMSG_FIRSTHDR(&m); int fd; memcpy(&fd, CMSG_DATA(h), sizeof(int)); return fd;
}
static void sync_send(int s, char x) { if (write(s, &x, 1) != 1) perror("write"); }
static char sync_recv(int s) { char x = 0; if (read(s, &x, 1) != 1) perror("read"); return x; }

static CUmemAllocationProp prop_of(int types) {
  CUmemAllocationProp p; memset(&p, 0, sizeof p);
  p.type = CU_MEM_ALLOCATION_TYPE_PINNED; p.location.type = CU_MEM_LOCATION_TYPE_DEVICE; p.location.id = 0;
  p.requestedHandleTypes = (CUmemAllocationHandleType)types; return p;
}
static CUmemAccessDesc rw(void) { CUmemAccessDesc a; a.location.type = CU_MEM_LOCATION_TYPE_DEVICE; a.location.id = 0; a.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE; return a; }
static CUcontext init(void) {
  CUdevice d; CUcontext c; cuInit(0); cuDeviceGet(&d, 0); cuDevicePrimaryCtxRetain(&c, d); cuCtxSetCurrent(c); return c;
}
static size_t G = 2 << 20;

static void read_probe(const char *key, CUdeviceptr va) {
  unsigned char buf[4] = {0xee, 0xee, 0xee, 0xee};
  CUresult r = cuMemcpyDtoH(buf, va, 4);
  printf("%s.%s=%s(%d) bytes=%02x%02x%02x%02x\n", who, key, nm(r), (int)r, buf[0], buf[1], buf[2], buf[3]);
  CUresult s = cuCtxSynchronize(); printf("%s.%s.sync_after=%s(%d)\n", who, key, nm(s), (int)s); fflush(stdout);
}

static int importer(int sock) {
  who = "imp"; init();
  int fd = recv_fd(sock); printf("imp.received_fd=%d\n", fd);
  CUmemGenericAllocationHandle h1 = 0, h2 = 0;
  R("import", cuMemImportFromShareableHandle(&h1, (void *)(uintptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
  R("import_twice", cuMemImportFromShareableHandle(&h2, (void *)(uintptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
  printf("imp.import_twice_same_handle=%d\n", h1 == h2);
  { CUmemAllocationProp q; memset(&q, 0, sizeof q); CUresult r = cuMemGetAllocationPropertiesFromHandle(&q, h1); printf("imp.props_of_import=%s types=%d\n", nm(r), (int)q.requestedHandleTypes); }
  // Export the imported handle again (re-share).
  int fd3 = -1; RV("export_of_import", cuMemExportToShareableHandle(&fd3, h1, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0), fd3);
  R("close_fd_after_import", close(fd) == 0 ? CUDA_SUCCESS : CUDA_ERROR_UNKNOWN);
  CUdeviceptr va = 0; R("reserve", cuMemAddressReserve(&va, G, 0, 0, 0));
  R("map", cuMemMap(va, G, 0, h1, 0));
  CUmemAccessDesc a = rw(); R("set_access", cuMemSetAccess(va, G, &a, 1));
  read_probe("read_after_set_access", va);
  // Legacy IPC on a VMM-mapped pointer (importer side).
  CUipcMemHandle ih; R("cuIpcGetMemHandle_on_imported_vmm", cuIpcGetMemHandle(&ih, va));
  sync_send(sock, 'A'); // exporter now unmaps + releases
  sync_recv(sock);
  read_probe("read_after_exporter_release", va);
  sync_send(sock, 'B'); // exporter exits
  sync_recv(sock); sleep(1);
  read_probe("read_after_exporter_exit", va);
  // Release our import handle while mapped, then read.
  R("release_import_while_mapped", cuMemRelease(h1));
  read_probe("read_after_release_while_mapped", va);
  R("release_second_import", cuMemRelease(h2));
  R("release_twice", cuMemRelease(h1));
  R("unmap", cuMemUnmap(va, G));
  read_probe("read_after_unmap", va);
  R("unmap_twice", cuMemUnmap(va, G));
  R("address_free", cuMemAddressFree(va, G));
  R("address_free_twice", cuMemAddressFree(va, G));
  // fd from re-export: import it and map it? (allocation should be gone now)
  CUmemGenericAllocationHandle h3 = 0;
  R("import_reexported_after_all_released", cuMemImportFromShareableHandle(&h3, (void *)(uintptr_t)fd3, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
  // Negative imports
  int devnull = open("/dev/null", O_RDWR); CUmemGenericAllocationHandle hn = 0;
  R("import_dev_null", cuMemImportFromShareableHandle(&hn, (void *)(uintptr_t)devnull, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
  R("import_closed_fd", cuMemImportFromShareableHandle(&hn, (void *)(uintptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
  R("import_fd_minus1", cuMemImportFromShareableHandle(&hn, (void *)(uintptr_t)-1, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
  R("import_fd_999999", cuMemImportFromShareableHandle(&hn, (void *)(uintptr_t)999999, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
  R("import_fd_stdin", cuMemImportFromShareableHandle(&hn, (void *)(uintptr_t)0, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
  R("import_fd_as_fabric", cuMemImportFromShareableHandle(&hn, (void *)(uintptr_t)fd3, CU_MEM_HANDLE_TYPE_FABRIC));
  R("ctx_sync_end", cuCtxSynchronize());
  return 0;
}

static int exporter(int sock) {
  who = "exp"; init();
  CUdevice d; cuDeviceGet(&d, 0); int v;
  RV("attr_vmm", cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, d), v);
  RV("attr_posix_fd", cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, d), v);
  RV("attr_fabric", cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED, d), v);
  RV("attr_win32", cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_WIN32_HANDLE_SUPPORTED, d), v);
  int rt = -1; cudaError_t re = cudaDeviceGetAttribute(&rt, (cudaDeviceAttr)CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, 0); printf("exp.rt_attr_posix=%s value=%d\n", cudaGetErrorName(re), rt);
  size_t g = 0;
  for (int t = 0; t < 3; t++) {
    int types = t == 0 ? 0 : t == 1 ? CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR : CU_MEM_HANDLE_TYPE_FABRIC;
    CUmemAllocationProp p = prop_of(types); char k[64];
    sprintf(k, "gran_min_types%d", types); RV(k, cuMemGetAllocationGranularity(&g, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM), g);
    sprintf(k, "gran_rec_types%d", types); RV(k, cuMemGetAllocationGranularity(&g, &p, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED), g);
  }
  { CUmemAllocationProp p = prop_of(0); R("gran_null_out", cuMemGetAllocationGranularity(NULL, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    R("gran_bad_option", cuMemGetAllocationGranularity(&g, &p, (CUmemAllocationGranularity_flags)7)); p.location.id = 9; RV("gran_bad_device", cuMemGetAllocationGranularity(&g, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM), g); }
  CUmemGenericAllocationHandle hn = 0, hp = 0, hf = 0, hx = 0;
  CUmemAllocationProp pn = prop_of(0), pp = prop_of(CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR), pf = prop_of(CU_MEM_HANDLE_TYPE_FABRIC);
  R("create_size_1MiB", cuMemCreate(&hx, 1 << 20, &pp, 0));
  R("create_size_2MiB_plus_1", cuMemCreate(&hx, G + 1, &pp, 0));
  R("create_size_0", cuMemCreate(&hx, 0, &pp, 0));
  R("create_size_4MiB", cuMemCreate(&hx, 2 * G, &pp, 0)); R("release_4MiB", cuMemRelease(hx));
  R("create_fabric", cuMemCreate(&hf, G, &pf, 0));
  { CUmemAllocationProp pb = prop_of(CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR | CU_MEM_HANDLE_TYPE_FABRIC); CUmemGenericAllocationHandle hb = 0;
    R("create_posix_and_fabric", cuMemCreate(&hb, G, &pb, 0)); if (hb) cuMemRelease(hb); }
  R("create_none", cuMemCreate(&hn, G, &pn, 0));
  int fdn = -1; RV("export_posix_of_none", cuMemExportToShareableHandle(&fdn, hn, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0), fdn);
  R("create_posix", cuMemCreate(&hp, G, &pp, 0));
  char fab[64]; R("export_fabric_of_posix", cuMemExportToShareableHandle(fab, hp, CU_MEM_HANDLE_TYPE_FABRIC, 0));
  int fd1 = -1, fd2 = -1;
  RV("export_posix", cuMemExportToShareableHandle(&fd1, hp, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0), fd1);
  RV("export_twice", cuMemExportToShareableHandle(&fd2, hp, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0), fd2);
  int fdf = -1; RV("export_posix_flags1", cuMemExportToShareableHandle(&fdf, hp, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 1), fdf);
  // Import in the exporting process.
  CUmemGenericAllocationHandle hs = 0;
  R("import_in_exporter", cuMemImportFromShareableHandle(&hs, (void *)(uintptr_t)fd2, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
  printf("exp.import_in_exporter_same_handle=%d\n", hs == hp);
  if (hs && hs != hp) R("release_self_import", cuMemRelease(hs));
  // Reservation / mapping edge cases.
  CUdeviceptr va = 0, vb = 0;
  R("reserve_1MiB", cuMemAddressReserve(&vb, 1 << 20, 0, 0, 0)); if (vb) R("free_1MiB", cuMemAddressFree(vb, 1 << 20));
  R("reserve", cuMemAddressReserve(&va, 2 * G, 0, 0, 0));
  R("map_size_larger_than_alloc", cuMemMap(va, 2 * G, 0, hp, 0));
  R("map_offset_nonzero", cuMemMap(va, G, G, hp, 0));
  R("map", cuMemMap(va, G, 0, hp, 0));
  R("map_again_same_va", cuMemMap(va, G, 0, hp, 0));
  CUmemAccessDesc a = rw();
  R("set_access_unmapped_part", cuMemSetAccess(va, 2 * G, &a, 1));
  R("set_access", cuMemSetAccess(va, G, &a, 1));
  R("memset", cuMemsetD8(va, 0xa5, G)); cuCtxSynchronize();
  read_probe("read_after_set_access", va);
  read_probe("read_unmapped_half_of_reservation", va + G);
  CUipcMemHandle ih; R("cuIpcGetMemHandle_on_vmm", cuIpcGetMemHandle(&ih, va));
  cudaIpcMemHandle_t rh; cudaError_t ce = cudaIpcGetMemHandle(&rh, (void *)va); printf("exp.cudaIpcGetMemHandle_on_vmm=%s(%d)\n", cudaGetErrorName(ce), (int)ce);
  { cudaPointerAttributes pa; ce = cudaPointerGetAttributes(&pa, (void *)va); printf("exp.cudaPointerGetAttributes=%s type=%d dev=%d\n", cudaGetErrorName(ce), (int)pa.type, pa.device); }
  { CUdeviceptr base = 0; size_t s = 0; CUresult r = cuMemGetAddressRange(&base, &s, va + 16); printf("exp.address_range=%s base_is_va=%d size=%zu\n", nm(r), base == va, s); }
  R("address_free_while_mapped", cuMemAddressFree(va, 2 * G));
  send_fd(sock, fd1);
  printf("exp.fds fd1=%d fd2=%d\n", fd1, fd2);
  if (sync_recv(sock) != 'A') return 1;
  R("unmap", cuMemUnmap(va, G));
  R("release", cuMemRelease(hp));
  R("release_twice", cuMemRelease(hp));
  R("export_after_release", cuMemExportToShareableHandle(&fdn, hp, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
  R("map_after_release", cuMemMap(va, G, 0, hp, 0));
  CUmemGenericAllocationHandle hz = 0;
  R("import_own_fd_after_release", cuMemImportFromShareableHandle(&hz, (void *)(uintptr_t)fd2, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
  if (hz) { R("map_reimported", cuMemMap(va, G, 0, hz, 0)); R("set_access_reimported", cuMemSetAccess(va, G, &a, 1)); read_probe("read_reimported_after_release", va); cuMemUnmap(va, G); cuMemRelease(hz); }
  R("address_free", cuMemAddressFree(va, 2 * G));
  cuMemRelease(hn);
  sync_send(sock, 'a');
  if (sync_recv(sock) != 'B') return 1;
  return 0; // exits: importer keeps its mapping
}

static int noaccess(void) {
  who = "noacc"; init();
  CUmemGenericAllocationHandle h = 0; CUmemAllocationProp p = prop_of(CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
  R("create", cuMemCreate(&h, G, &p, 0));
  CUdeviceptr va = 0; R("reserve", cuMemAddressReserve(&va, G, 0, 0, 0)); R("map", cuMemMap(va, G, 0, h, 0));
  read_probe("read_before_set_access", va);
  R("memset_before_set_access", cuMemsetD8(va, 0x11, 4)); R("memset_before.sync", cuCtxSynchronize());
  { unsigned char b[4] = {1, 2, 3, 4}; R("write_before_set_access", cuMemcpyHtoD(va, b, 4)); R("write_before.sync", cuCtxSynchronize()); }
  CUmemAccessDesc a = rw(); a.flags = CU_MEM_ACCESS_FLAGS_PROT_READ; R("set_access_read_only", cuMemSetAccess(va, G, &a, 1));
  read_probe("read_with_read_only", va);
  { unsigned char b[4] = {1, 2, 3, 4}; R("write_with_read_only", cuMemcpyHtoD(va, b, 4)); R("write_ro.sync", cuCtxSynchronize()); }
  a = rw(); R("set_access_rw", cuMemSetAccess(va, G, &a, 1));
  read_probe("read_after_set_access", va);
  R("unmap", cuMemUnmap(va, G));
  read_probe("read_after_unmap", va);
  R("map_again", cuMemMap(va, G, 0, h, 0));
  read_probe("read_after_remap_without_access", va);
  R("release_while_mapped", cuMemRelease(h));
  a = rw(); R("set_access_after_release", cuMemSetAccess(va, G, &a, 1));
  read_probe("read_after_release_while_mapped", va);
  R("unmap2", cuMemUnmap(va, G)); R("address_free", cuMemAddressFree(va, G));
  return 0;
}

int main(void) {
  setvbuf(stdout, NULL, _IONBF, 0);
  pid_t n = fork();
  if (n == 0) _exit(noaccess());
  int st; waitpid(n, &st, 0); printf("noacc.exit_status=%d\n", st);
  int sv[2]; socketpair(AF_UNIX, SOCK_STREAM, 0, sv);
  pid_t e = fork();
  if (e == 0) { close(sv[1]); int r = exporter(sv[0]); printf("exp.exiting r=%d\n", r); _exit(r); }
  pid_t i = fork();
  if (i == 0) { close(sv[0]); _exit(importer(sv[1])); }
  close(sv[0]); close(sv[1]);
  waitpid(e, &st, 0); printf("exp.exit_status=%d\n", st);
  waitpid(i, &st, 0); printf("imp.exit_status=%d\n", st);
  return 0;
}
