#include "core/drain.h"

#include <linux/sockios.h>
#include <poll.h>
#include <stdio.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/clock.h"

long herd_unread_bytes(int fd)
{
    struct stat st;
    if (fstat(fd, &st) != 0)
        return -1;
    /* A reader that is gone (the launcher killed) will never take them. */
    struct pollfd p = {.fd = fd, .events = POLLOUT};
    if (poll(&p, 1, 0) == 1 && (p.revents & (POLLERR | POLLHUP | POLLNVAL)))
        return -1;
    int n = 0;
    if (S_ISFIFO(st.st_mode))
        return ioctl(fd, FIONREAD, &n) == 0 ? n : -1;
    if (S_ISSOCK(st.st_mode))
        return ioctl(fd, SIOCOUTQ, &n) == 0 ? n : -1;
    return -1;
}

bool herd_wait_output_read(double max_s)
{
    fflush(stdout);
    fflush(stderr);
    for (double until = herd_now() + max_s;;) {
        if (herd_unread_bytes(STDOUT_FILENO) <= 0 && herd_unread_bytes(STDERR_FILENO) <= 0)
            return true;
        if (herd_now() >= until)
            return false;
        herd_sleep(0.01);
    }
}
