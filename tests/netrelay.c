/* netrelay: a user-space link between two TAP devices that delays every frame and
 * drops some, in both directions, for the test cluster (tests/netcluster.sh) on
 * kernels without netem.
 *
 *   netrelay TAP_A TAP_B DELAY_US LOSS_PPM SEED
 *
 * Creates (or attaches to) TAP_A and TAP_B in the current network namespace, then
 * forwards each Ethernet frame read from one to the other DELAY_US microseconds
 * later, dropping LOSS_PPM in a million at random (a seeded generator, so a run is
 * repeatable in what it draws, not in which packets the timing sends). The devices
 * may be moved to other namespaces afterwards: the file descriptors stay bound.
 * Prints "ready" on stdout once both devices exist, then runs until killed. */
#include <errno.h>
#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#define FRAME_MAX 2048  /* the TAPs keep the default MTU of 1500 */
#define QUEUE_LEN 8192  /* frames in flight per direction: 16 MiB, > 10 ms at 10 Gbit/s */

typedef struct frame {
    int64_t due_ns;
    uint16_t len;
    unsigned char data[FRAME_MAX];
} frame;

/* One direction: frames read from `from`, queued in arrival order (all share the
 * same delay, so arrival order is due order), written to `to`. */
typedef struct direction {
    int from, to;
    frame *q;
    size_t head, count;
} direction;

static int64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static uint64_t rng_state;
static uint64_t next_random(void) /* splitmix64 */
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static int open_tap(const char *name)
{
    int fd = open("/dev/net/tun", O_RDWR | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        fprintf(stderr, "netrelay: cannot open /dev/net/tun: %s\n", strerror(errno));
        exit(1);
    }
    struct ifreq ifr;
    memset(&ifr, 0, sizeof ifr);
    ifr.ifr_flags = IFF_TAP | IFF_NO_PI;
    if (strlen(name) >= sizeof ifr.ifr_name) {
        fprintf(stderr, "netrelay: device name '%s' is longer than %zu characters\n", name,
                sizeof ifr.ifr_name - 1);
        exit(2);
    }
    strcpy(ifr.ifr_name, name);
    if (ioctl(fd, TUNSETIFF, &ifr) < 0) {
        fprintf(stderr, "netrelay: cannot create TAP device '%s': %s\n", name, strerror(errno));
        exit(1);
    }
    return fd;
}

static long parse_arg(const char *s, const char *what, long max)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < 0 || v > max) {
        fprintf(stderr, "netrelay: %s must be an integer in 0..%ld, got '%s'\n", what, max, s);
        exit(2);
    }
    return v;
}

/* Reads every frame waiting on d->from into the queue (or drops it). */
static void take(direction *d, int64_t delay_ns, uint64_t loss_ppm)
{
    for (;;) {
        frame *f = &d->q[(d->head + d->count) % QUEUE_LEN];
        unsigned char scratch[FRAME_MAX];
        bool full = d->count == QUEUE_LEN; /* a full queue drops, like a router's buffer */
        ssize_t n = read(d->from, full ? scratch : f->data, FRAME_MAX);
        if (n <= 0)
            return; /* EAGAIN, or the device went down */
        if (full || next_random() % 1000000 < loss_ppm)
            continue;
        f->len = (uint16_t)n;
        f->due_ns = now_ns() + delay_ns;
        d->count++;
    }
}

/* Writes every frame that is due; returns the next due time or -1. */
static int64_t deliver(direction *d, int64_t now)
{
    while (d->count) {
        frame *f = &d->q[d->head];
        if (f->due_ns > now)
            return f->due_ns;
        /* A failed write (device down, its queue full) loses the frame, as a wire would. */
        if (write(d->to, f->data, f->len) < 0 && errno != EAGAIN && errno != EIO)
            fprintf(stderr, "netrelay: write: %s\n", strerror(errno));
        d->head = (d->head + 1) % QUEUE_LEN;
        d->count--;
    }
    return -1;
}

int main(int argc, char **argv)
{
    if (argc != 6) {
        fprintf(stderr, "usage: netrelay TAP_A TAP_B DELAY_US LOSS_PPM SEED\n");
        return 2;
    }
    int64_t delay_ns = parse_arg(argv[3], "DELAY_US", 10000000) * 1000;
    uint64_t loss_ppm = (uint64_t)parse_arg(argv[4], "LOSS_PPM", 1000000);
    rng_state = (uint64_t)parse_arg(argv[5], "SEED", 0x7fffffff);
    signal(SIGPIPE, SIG_IGN);
    prctl(PR_SET_TIMERSLACK, 1UL); /* wake at the due time, not up to 50 us later */

    int a = open_tap(argv[1]), b = open_tap(argv[2]);
    direction dirs[2] = {{.from = a, .to = b}, {.from = b, .to = a}};
    for (int i = 0; i < 2; i++) {
        dirs[i].q = malloc(QUEUE_LEN * sizeof(frame));
        if (!dirs[i].q) {
            fprintf(stderr, "netrelay: out of memory\n");
            return 1;
        }
    }
    printf("ready\n");
    fflush(stdout);

    struct pollfd p[2] = {{.fd = a, .events = POLLIN}, {.fd = b, .events = POLLIN}};
    for (;;) {
        int64_t now = now_ns(), next = -1;
        for (int i = 0; i < 2; i++) {
            int64_t due = deliver(&dirs[i], now);
            if (due >= 0 && (next < 0 || due < next))
                next = due;
        }
        struct timespec wait, *timeout = NULL;
        if (next >= 0) {
            int64_t left = next - now;
            wait.tv_sec = left / 1000000000;
            wait.tv_nsec = left % 1000000000;
            timeout = &wait;
        }
        if (ppoll(p, 2, timeout, NULL) < 0 && errno != EINTR) {
            fprintf(stderr, "netrelay: poll: %s\n", strerror(errno));
            return 1;
        }
        for (int i = 0; i < 2; i++)
            if (p[i].revents & POLLIN)
                take(&dirs[i], delay_ns, loss_ppm);
    }
}
