/* Waiting for a launcher to read what this process wrote. MPI launchers forward a
 * rank's stdout and stderr through a pipe (MPICH's Hydra) or a socket, and a rank that
 * aborts right after writing can lose its last lines: the launcher ends the job when the
 * abort reaches it, whatever it has not read yet is dropped. On a loaded machine the
 * launcher may wait seconds for a time slice. */
#ifndef HERD_CORE_DRAIN_H
#define HERD_CORE_DRAIN_H

#include <stdbool.h>

/* Bytes written to fd that its reader has not taken yet: a pipe's (FIONREAD) or a
 * socket's send queue (SIOCOUTQ). -1 where nothing tells (a terminal, a file, a closed
 * fd) or nobody will read them (the reader gone). */
long herd_unread_bytes(int fd);

/* Flushes stdout and stderr, then waits until neither holds unread bytes, polling every
 * 10 ms for at most max_s seconds. True when both were read (or cannot tell). */
bool herd_wait_output_read(double max_s);

#endif
