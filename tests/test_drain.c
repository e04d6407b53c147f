/* Waiting for a launcher to read a failing rank's last words (core/drain.h): what a pipe
 * and a socket say is unread, and the wait ending once a reader has taken it. */
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/drain.h"
#include "testutil.h"

static void test_pipe(void **state)
{
    (void)state;
    int p[2];
    assert_int_equal(pipe(p), 0);
    assert_int_equal(herd_unread_bytes(p[1]), 0);
    assert_int_equal(write(p[1], "hello", 5), 5);
    assert_int_equal(herd_unread_bytes(p[1]), 5);
    char buf[8];
    assert_int_equal(read(p[0], buf, 3), 3);
    assert_int_equal(herd_unread_bytes(p[1]), 2);
    close(p[0]); /* nobody will read the rest: nothing to wait for */
    assert_int_equal(herd_unread_bytes(p[1]), -1);
    close(p[1]);
}

static void test_socket(void **state)
{
    (void)state;
    int s[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, s), 0);
    assert_int_equal(herd_unread_bytes(s[0]), 0);
    assert_int_equal(write(s[0], "hello", 5), 5);
    assert_true(herd_unread_bytes(s[0]) > 0);
    char buf[8];
    assert_int_equal(read(s[1], buf, 5), 5);
    assert_int_equal(herd_unread_bytes(s[0]), 0);
    close(s[0]);
    close(s[1]);
}

static void test_file(void **state)
{
    (void)state;
    char *dir = tu_tempdir();
    char *path = tu_write_file(dir, "f", "abc", 3);
    int fd = open(path, O_RDONLY);
    assert_true(fd >= 0);
    assert_int_equal(herd_unread_bytes(fd), -1); /* a file tells nothing */
    close(fd);
    assert_int_equal(herd_unread_bytes(fd), -1); /* nor a closed descriptor */
    free(path);
    tu_rmtree(dir);
    free(dir);
}

/* Forks a child that writes "last words\n" to stderr, the write end of pipe p, and exits 0
 * when herd_wait_output_read(max_s) says it was read, 1 when it gave up. The parent
 * keeps both ends. */
static pid_t child_waiting_to_be_read(const int p[2], double max_s)
{
    pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0) {
        close(p[0]); /* the parent still holds its own read end */
        dup2(p[1], STDERR_FILENO);
        if (write(STDERR_FILENO, "last words\n", 11) != 11)
            _exit(3);
        _exit(herd_wait_output_read(max_s) ? 0 : 1);
    }
    return child;
}

static int exit_code(pid_t child)
{
    int status = 0;
    assert_int_equal(waitpid(child, &status, 0), child);
    assert_true(WIFEXITED(status));
    return WEXITSTATUS(status);
}

/* The child's wait returns once the parent has read its words. */
static void test_wait_for_reader(void **state)
{
    (void)state;
    int p[2];
    assert_int_equal(pipe(p), 0);
    pid_t child = child_waiting_to_be_read(p, 30.0);
    usleep(200 * 1000);
    int status = 0;
    assert_int_equal(waitpid(child, &status, WNOHANG), 0); /* still waiting on its words */
    char buf[32];
    assert_int_equal(read(p[0], buf, sizeof buf), 11);
    assert_int_equal(exit_code(child), 0);
    close(p[0]);
    close(p[1]);
}

/* Nobody reads: the wait gives up after its limit, and says so. */
static void test_wait_gives_up(void **state)
{
    (void)state;
    int p[2];
    assert_int_equal(pipe(p), 0);
    assert_int_equal(exit_code(child_waiting_to_be_read(p, 0.1)), 1);
    close(p[0]);
    close(p[1]);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pipe),
        cmocka_unit_test(test_socket),
        cmocka_unit_test(test_file),
        cmocka_unit_test(test_wait_for_reader),
        cmocka_unit_test(test_wait_gives_up),
    };
    return tu_run(tests, NULL, NULL);
}
