/* query.c: lists the sock_ops programs attached to a cgroup (read-only BPF_PROG_QUERY), with run stats. */
#include <linux/bpf.h>
#include <stdio.h>
#include <string.h>
#include <fcntl.h>
#include <unistd.h>
#include <stdlib.h>
#include <sys/syscall.h>
int main(int c, char **v){
  int cg=open(c>1?v[1]:"/sys/fs/cgroup/unified",O_RDONLY|O_DIRECTORY);
  __u32 ids[64]; union bpf_attr a; memset(&a,0,sizeof a);
  a.query.target_fd=cg; a.query.attach_type=c>2?atoi(v[2]):BPF_CGROUP_SOCK_OPS; a.query.prog_ids=(long)ids; a.query.prog_cnt=64;
  if(syscall(SYS_bpf,BPF_PROG_QUERY,&a,sizeof a)<0){perror("query");return 1;}
  printf("flags %u count %u\n",a.query.attach_flags,a.query.prog_cnt);
  for(unsigned i=0;i<a.query.prog_cnt;i++){
    union bpf_attr b; memset(&b,0,sizeof b); b.prog_id=ids[i];
    int fd=syscall(SYS_bpf,BPF_PROG_GET_FD_BY_ID,&b,sizeof b);
    struct bpf_prog_info info; memset(&info,0,sizeof info);
    union bpf_attr d; memset(&d,0,sizeof d); d.info.bpf_fd=fd; d.info.info_len=sizeof info; d.info.info=(long)&info;
    syscall(SYS_bpf,BPF_OBJ_GET_INFO_BY_FD,&d,sizeof d);
    printf("id %u name %s insns %u run_cnt %llu run_time_ns %llu\n",ids[i],info.name,info.xlated_prog_len/8,(unsigned long long)info.run_cnt,(unsigned long long)info.run_time_ns);
    close(fd);
  }
}
