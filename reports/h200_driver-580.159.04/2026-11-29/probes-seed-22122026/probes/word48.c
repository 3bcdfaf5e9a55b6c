// Own probe: bytes 48..52 of a cudaIpcMemHandle hold a 32-bit word that looks
// like an RM client handle (0xc1d0....). Open the exporter's handle with that
// word replaced by: itself, the flip of byte 48, a live other process's word,
// a dead process's word, the importer's own word, and nearby values.
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <unistd.h>
#include <signal.h>
#include <sys/wait.h>
static uint32_t oid(const cudaIpcMemHandle_t *h){uint32_t v; memcpy(&v,((const char*)h)+48,4); return v;}
static void setw(cudaIpcMemHandle_t *h,uint32_t v){memcpy(((char*)h)+48,&v,4);}
static int export_one(const char*fn,size_t sz){void*p; cudaSetDevice(0); if(cudaMalloc(&p,sz))return 1; cudaMemset(p,1,sz); cudaIpcMemHandle_t h; cudaIpcGetMemHandle(&h,p);
  char t[256]; sprintf(t,"%s.tmp",fn); FILE*f=fopen(t,"wb"); fwrite(&h,sizeof h,1,f); fclose(f); rename(t,fn); return 0;}
static cudaIpcMemHandle_t readh(const char*fn){cudaIpcMemHandle_t h; for(int i=0;i<400;i++){FILE*f=fopen(fn,"rb"); if(f){fread(&h,sizeof h,1,f); fclose(f); return h;} usleep(25000);} fprintf(stderr,"no %s\n",fn); exit(2);}
static pid_t spawn(const char*self,const char*mode,const char*fn){pid_t p=fork(); if(!p){execl(self,self,mode,fn,(char*)0); _exit(3);} return p;}
int main(int argc,char**argv){
  if(argc>=3&&!strcmp(argv[1],"helper")){ if(export_one(argv[2],2<<20))return 1; sleep(60); return 0;}
  if(argc>=3&&!strcmp(argv[1],"import")){
    FILE*f=fopen(argv[2],"rb"); int n; fread(&n,4,1,f); cudaIpcMemHandle_t*h=malloc(sizeof(*h)*n); char (*lab)[32]=malloc(32*n);
    fread(h,sizeof(*h),n,f); fread(lab,32,n,f); fclose(f);
    char own[64]; sprintf(own,"%s.own",argv[2]); export_one(own,2<<20); cudaIpcMemHandle_t oh=readh(own); uint32_t W=oid(&oh);
    for(int i=0;i<=n;i++){ cudaIpcMemHandle_t g; const char*l; if(i<n){g=h[i];l=lab[i];} else {g=h[0]; setw(&g,W); l="importer's own word";}
      void*p=0; cudaError_t e=cudaIpcOpenMemHandle(&p,g,cudaIpcMemLazyEnablePeerAccess); cudaGetLastError(); if(!e) cudaIpcCloseMemHandle(p);
      printf("word=%08x %-28s -> %d %s\n",oid(&g),l,(int)e,e?cudaGetErrorName(e):"ok"); }
    printf("importer's own word %08x\n",W); return 0;}
  char fa[64],fb[64],fi[64]; sprintf(fa,"/tmp/w48a.%d",getpid()); sprintf(fb,"/tmp/w48b.%d",getpid()); sprintf(fi,"/tmp/w48i.%d",getpid());
  size_t sz=argc>1?atoll(argv[1]):1000;
  pid_t a=spawn(argv[0],"helper",fa); cudaIpcMemHandle_t ha=readh(fa); uint32_t Y=oid(&ha);
  pid_t b=spawn(argv[0],"helper",fb); cudaIpcMemHandle_t hb=readh(fb); uint32_t Z=oid(&hb); kill(b,SIGKILL); waitpid(b,0,0); usleep(300000);
  void*p; cudaSetDevice(0); cudaMalloc(&p,sz); cudaMemset(p,7,sz); cudaIpcMemHandle_t h; cudaIpcGetMemHandle(&h,p); uint32_t X=oid(&h);
  printf("exporter %08x, live helper %08x, dead helper %08x, size %zu\n",X,Y,Z,sz);
  cudaIpcMemHandle_t v[64]; char lab[64][32]; int n=0;
  #define ADD(w,...) do{v[n]=h; setw(&v[n],(w)); snprintf(lab[n],32,__VA_ARGS__); n++;}while(0)
  ADD(X,"unchanged"); ADD(X^0xff,"byte 48 flipped"); ADD(Y,"live helper's word"); ADD(Z,"dead helper's word");
  for(int k=-8;k<=8;k++) if(k) ADD(X+k,"exporter%+d",k);
  for(int k=1;k<8;k++) ADD(Y+k,"live helper%+d",k);
  FILE*f=fopen(fi,"wb"); fwrite(&n,4,1,f); fwrite(v,sizeof(v[0]),n,f); fwrite(lab,32,n,f); fclose(f);
  fflush(stdout); pid_t c=spawn(argv[0],"import",fi); waitpid(c,0,0);
  kill(a,SIGKILL); waitpid(a,0,0); return 0;
}
