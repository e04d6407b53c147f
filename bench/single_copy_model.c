/* A probe that models Open MPI's two shared-memory transports for one message
 * of each size given: one process_vm_readv of the whole message from a forked
 * peer (single copy, cma) against the peer copying it into 8 shared 32 KiB
 * fragments while this process copies them out (copy-in/copy-out, none); best
 * of 8. Kept as the evidence that it does not predict MPI_Allreduce
 * (docs/cluster.md). gcc -O2 bench/single_copy_model.c && ./a.out BYTES...
 */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#define FRAG ((size_t)32 << 10)
#define SLOTS 8
#define PASSES 8
static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}
typedef struct {
  _Atomic int go;
  _Atomic long filled, drained;
  char ring[SLOTS][FRAG];
} shared;
/* child: on go=k (odd: copy-in of S bytes; even: idle) */
int main(int argc, char **argv) {
  size_t maxb = 0;
  int n = argc - 1;
  size_t sz[16];
  for (int i = 0; i < n; i++) {
    sz[i] = strtoul(argv[i + 1], 0, 10);
    if (sz[i] > maxb)
      maxb = sz[i];
  }
  shared *sh = mmap(0, sizeof *sh, PROT_READ | PROT_WRITE,
                    MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  char *src = aligned_alloc(4096, maxb), *dst = aligned_alloc(4096, maxb);
  memset(src, 1, maxb);
  memset(dst, 0, maxb);
  _Atomic size_t *cur =
      mmap(0, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  pid_t c = fork();
  if (c == 0) {
    memset(src, 2, maxb);
    atomic_store(&sh->go, -1);
    int seen = -1;
    for (;;) {
      int g = atomic_load(&sh->go);
      if (g == seen)
        continue;
      seen = g;
      if (g <= 0)
        continue;
      size_t S = *cur;
      long k = 0;
      for (size_t off = 0; off < S; off += FRAG, k++) {
        size_t len = S - off < FRAG ? S - off : FRAG;
        while (k - atomic_load(&sh->drained) >= SLOTS)
          ;
        memcpy(sh->ring[k % SLOTS], src + off, len);
        atomic_store(&sh->filled, k + 1);
      }
    }
  }
  while (atomic_load(&sh->go) != -1)
    ;
  int gen = 0;
  for (int i = 0; i < n; i++) {
    size_t S = sz[i];
    double bc = 1e30, bn = 1e30;
    for (int p = 0; p < PASSES; p++) {
      double t = now();
      size_t got = 0;
      while (got < S) {
        struct iovec l = {dst + got, S - got}, r = {src + got, S - got};
        ssize_t x = process_vm_readv(c, &l, 1, &r, 1, 0);
        if (x <= 0) {
          perror("cma");
          return 1;
        }
        got += x;
      }
      t = now() - t;
      if (t < bc)
        bc = t;
      *cur = S;
      atomic_store(&sh->filled, 0);
      atomic_store(&sh->drained, 0);
      gen++;
      t = now();
      atomic_store(&sh->go, gen);
      long k = 0;
      for (size_t off = 0; off < S; off += FRAG, k++) {
        size_t len = S - off < FRAG ? S - off : FRAG;
        while (atomic_load(&sh->filled) <= k)
          ;
        memcpy(dst + off, sh->ring[k % SLOTS], len);
        atomic_store(&sh->drained, k + 1);
      }
      t = now() - t;
      if (t < bn)
        bn = t;
    }
    printf("%10zu cma %8.1f us  copy %8.1f us  ratio(copy/cma) %.2f  dst=%d\n",
           S, bc * 1e6, bn * 1e6, bn / bc, dst[0]);
  }
  kill(c, SIGKILL);
  waitpid(c, 0, 0);
  return 0;
}
