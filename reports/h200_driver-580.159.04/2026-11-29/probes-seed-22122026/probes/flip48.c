// Own probe: what the export-object word (bytes 48..52) of a cudaIpcMemHandle
// looks like, and what opening it with byte 48 flipped answers.
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
static uint32_t oid(const cudaIpcMemHandle_t *h){uint32_t v; memcpy(&v,((char*)h)+48,4); return v;}
int main(int argc,char**argv){
  if(argc>=3 && !strcmp(argv[1],"import")){
    FILE*f=fopen(argv[2],"rb"); int n; fread(&n,4,1,f);
    cudaIpcMemHandle_t*h=(cudaIpcMemHandle_t*)malloc(sizeof(*h)*n); fread(h,sizeof(*h),n,f); fclose(f);
    cudaSetDevice(0); cudaFree(0);
    int cnt[1024]={0};
    for(int i=0;i<n;i++){
      cudaIpcMemHandle_t g=h[i]; ((unsigned char*)&g)[48]^=0xff; uint32_t fid=oid(&g);
      int hit=-1; for(int j=0;j<n;j++) if(oid(&h[j])==fid) hit=j;
      void*p=0; cudaError_t e=cudaIpcOpenMemHandle(&p,g,cudaIpcMemLazyEnablePeerAccess); cudaGetLastError();
      if(e==cudaSuccess) cudaIpcCloseMemHandle(p);
      printf("imp %d id=%08x flipped=%08x hits_export=%d -> %d\n",i,oid(&h[i]),fid,hit,(int)e);
    }
    return 0;
  }
  int n=argc>1?atoi(argv[1]):1; size_t sz=argc>2?atoll(argv[2]):1000;
  cudaSetDevice(0); cudaFree(0);
  cudaIpcMemHandle_t*h=(cudaIpcMemHandle_t*)malloc(sizeof(*h)*n);
  for(int i=0;i<n;i++){void*p; if(cudaMalloc(&p,sz)){printf("malloc fail\n");return 1;} cudaMemset(p,0x5a,sz); cudaIpcGetMemHandle(&h[i],p);
    unsigned char*b=(unsigned char*)&h[i]; printf("exp %d ptr=%p b40..56=",i,p); for(int k=40;k<56;k++)printf("%02x",b[k]); printf(" id=%08x\n",oid(&h[i]));}
  char fn[64]; sprintf(fn,"/tmp/h%d.bin",getpid()); FILE*f=fopen(fn,"wb"); fwrite(&n,4,1,f); fwrite(h,sizeof(*h),n,f); fclose(f);
  char cmd[256]; sprintf(cmd,"%s import %s",argv[0],fn); fflush(stdout); system(cmd);
  return 0;
}
