/* herd run's module in the library (tools/run_plan.h), without the CLI: its strict
 * numbers, the shell-like split of --mpirun-args, -H lists, each launcher's flags and
 * what it refuses, supervision's checks and defaults, and the command it builds. */
#include <stdio.h>
#include <string.h>

#include "testutil.h"
#include "tools/run_plan.h"

static void test_numbers(void **state)
{
    (void)state;
    long v = 0;
    assert_true(run_parse_long("0", 0, 10, &v) && v == 0);
    assert_true(run_parse_long("-3", -5, 10, &v) && v == -3);
    assert_true(run_parse_long("1048576", 1, 1 << 20, &v) && v == 1 << 20);
    static const char *const bad_long[] = {"", "-", "+1", " 1", "1 ", "0x10", "1e3", "1.0", "11", "99999999999999999999"};
    for (size_t i = 0; i < sizeof bad_long / sizeof *bad_long; i++) {
        v = 42;
        assert_false(run_parse_long(bad_long[i], 0, 10, &v));
        assert_int_equal(v, 42); /* untouched when refused */
    }
    double d = 0;
    assert_true(run_parse_double("0.5", 0.1, 10, &d) && d == 0.5);
    assert_true(run_parse_double("1e+1", 0.1, 10, &d) && d == 10);
    assert_true(run_parse_double("30", 0.1, 86400, &d) && d == 30);
    static const char *const bad_double[] = {"", "inf", "nan", "0x1p3", "1e", " 2", "2s", "0.05", "1e400"};
    for (size_t i = 0; i < sizeof bad_double / sizeof *bad_double; i++)
        assert_false(run_parse_double(bad_double[i], 0.1, 86400, &d));
}

static void test_split(void **state)
{
    (void)state;
    run_argv a = {0};
    char why[256];
    assert_true(run_argv_split(&a, " a 'b c'  \"d\\\"e\" f\\ g ", why, sizeof why));
    assert_int_equal(a.n, 4);
    assert_string_equal(a.v[0], "a");
    assert_string_equal(a.v[1], "b c");
    assert_string_equal(a.v[2], "d\"e");
    assert_string_equal(a.v[3], "f g");
    assert_null(a.v[4]);
    assert_false(run_argv_split(&a, "x 'y", why, sizeof why));
    assert_string_equal(why, "unbalanced ' quote at character 3 of 'x 'y'");
    assert_false(run_argv_split(&a, "x\\", why, sizeof why));
    assert_string_equal(why, "a backslash ends 'x\\'");
    run_argv_free(&a);
}

static void test_host_list(void **state)
{
    (void)state;
    run_hosts h = {0};
    char why[256] = "";
    assert_true(run_parse_host_list("a:4,b", &h, why, sizeof why));
    assert_int_equal(h.n, 2);
    assert_int_equal(run_hosts_slots(&h), 5);
    run_hosts_clear(&h);
    assert_false(run_parse_host_list("a:4,,b", &h, why, sizeof why));
    assert_string_equal(why, "bad host list 'a:4,,b'; expected host[:slots],... such as a:4,b:4");
    run_hosts_free(&h);
}

/* The flags kind k gives plan p, as one string; "" with why when refused. */
static herd_status flags(run_plan p, char *out, size_t cap, char *why, size_t wcap)
{
    run_argv a = {0};
    herd_status st = run_launcher_args(&p, &a, why, wcap);
    out[0] = '\0';
    for (int i = 0; st == HERD_OK && i < a.n; i++)
        snprintf(out + strlen(out), cap - strlen(out), "%s%s", i ? " " : "", a.v[i]);
    run_argv_free(&a);
    return st;
}

static void test_launcher_args(void **state)
{
    (void)state;
    run_host hosts[] = {{"a", 2}, {"b", 2}};
    char *exports[] = {"OMP_NUM_THREADS=2"}, *mca[] = {"btl", "self,tcp"};
    run_plan p = {.kind = LAUNCH_HYDRA, .np = 4, .threads = 2, .hosts = hosts, .nhosts = 2, .bind = "core",
                  .exports = exports, .nexports = 1};
    char out[512], why[512];
    assert_int_equal(flags(p, out, sizeof out, why, sizeof why), HERD_OK);
    assert_string_equal(out, "-n 4 -hosts a:2,b:2 -bind-to core:2 -genv OMP_NUM_THREADS 2");
    p.kind = LAUNCH_SRUN;
    assert_int_equal(flags(p, out, sizeof out, why, sizeof why), HERD_OK);
    assert_string_equal(out, "-n 4 -w a,b --ntasks-per-node=2 --cpus-per-task=2 --cpu-bind=cores "
                             "--export=ALL,OMP_NUM_THREADS=2");
    /* What a kind cannot say is refused, naming it. */
    p.mca = mca;
    p.nmca = 2;
    assert_int_equal(flags(p, out, sizeof out, why, sizeof why), HERD_ERR_INVALID_ARG);
    assert_non_null(strstr(why, "--mca is Open MPI's; srun takes"));
    p.nmca = 0;
    hosts[1].slots = 3;
    assert_int_equal(flags(p, out, sizeof out, why, sizeof why), HERD_ERR_INVALID_ARG);
    assert_non_null(strstr(why, "hosts have 2 and 3 slots"));
    p.kind = LAUNCH_HYDRA;
    p.report = true;
    assert_int_equal(flags(p, out, sizeof out, why, sizeof why), HERD_ERR_INVALID_ARG);
    assert_non_null(strstr(why, "Hydra has no --report-bindings"));
}

static void test_check_supervised(void **state)
{
    (void)state;
    char *cmd[] = {"train", "--model", "mlp", "--checkpoint-dir", "ck"};
    run_args r = {.np = 4, .cmd = cmd, .ncmd = 5, .max_restarts = -1, .elastic_timeout = -1, .min_np = 2,
                  .np_multiple = 1};
    char why[512];
    /* Elastic flags need --max-restarts. */
    assert_int_equal(run_check_supervised(&r, NULL, 1, "", why, sizeof why), HERD_ERR_INVALID_ARG);
    assert_string_equal(why, "--min-np shapes restarts: it goes with --max-restarts K");
    /* Supervised: the defaults filled in. */
    r.max_restarts = 2;
    r.min_np = 0;
    assert_int_equal(run_check_supervised(&r, NULL, 1, "", why, sizeof why), HERD_OK);
    assert_int_equal(r.min_np, 1);
    assert_int_equal(r.max_np, 4);
    assert_int_equal(r.elastic_timeout, 600);
    assert_string_equal(r.elastic_batch, "keep");
    /* Below what train needs (as the CLI reads it from train's flags), and beyond -H. */
    r.min_np = r.max_np = 0;
    assert_int_equal(run_check_supervised(&r, NULL, 6, "train --zero 1 ...", why, sizeof why), HERD_ERR_INVALID_ARG);
    assert_string_equal(why, "-np 4 is below the smallest job train can run: train --zero 1 ..., so 6 ranks");
    run_hosts h = {0};
    assert_true(run_parse_host_list("a:1,b:1", &h, why, sizeof why));
    r.min_np = r.max_np = 0;
    assert_int_equal(run_check_supervised(&r, &h, 1, "", why, sizeof why), HERD_ERR_INVALID_ARG);
    assert_string_equal(why, "-np 4 is more than the 2 slot(s) the hostfile offers (a host without a slot count counts 1)");
    run_hosts_free(&h);
}

/* The command herd run builds: herd's own subcommands run this binary with --threads;
 * any other program (python3 for import herd and herd.torch) runs as given. */
static void test_commands(void **state)
{
    (void)state;
    assert_true(run_is_herd_command("train") && run_is_herd_command("doctor"));
    assert_false(run_is_herd_command("python3") || run_is_herd_command("trian"));
    assert_true(run_find_executable("sh") && !run_find_executable("no-such-program-herd"));
    run_argv extra = {0};
    char *train[] = {"train", "--model", "mlp"}, *python[] = {"python3", "script.py", "--lr", "1"};
    run_args r = {.np = 2, .tpr = 1, .launcher = "mpirun", .kind = LAUNCH_OPENMPI, .extra = &extra,
                  .max_restarts = -1, .np_multiple = 1};
    char why[512];
    for (int k = 0; k < 2; k++) {
        r.cmd = k == 0 ? train : python;
        r.ncmd = k == 0 ? 3 : 4;
        run_command c = {0};
        assert_int_equal(run_build_command(&r, &(run_attempt){.np = 2, .restarts = -1}, &c, why, sizeof why),
                         HERD_OK);
        int at = -1; /* where the command starts */
        for (int i = 0; i < c.argv.n && at < 0; i++)
            if (strcmp(c.argv.v[i], r.cmd[0]) == 0)
                at = i;
        assert_true(at > 0);
        for (int i = 0; i < r.ncmd; i++)
            assert_string_equal(c.argv.v[at + i], r.cmd[i]);
        if (k == 0) { /* this binary before train, --threads 1 after its flags */
            assert_non_null(strstr(c.argv.v[at - 1], "test_run_plan"));
            assert_int_equal(c.argv.n, at + 5);
            assert_string_equal(c.argv.v[at + 3], "--threads");
        } else { /* python3 as given, nothing added */
            assert_null(strstr(c.argv.v[at - 1], "test_run_plan"));
            assert_int_equal(c.argv.n, at + 4);
        }
        run_argv_free(&c.argv);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_numbers),
        cmocka_unit_test(test_split),
        cmocka_unit_test(test_host_list),
        cmocka_unit_test(test_launcher_args),
        cmocka_unit_test(test_check_supervised),
        cmocka_unit_test(test_commands),
    };
    return tu_run(tests, NULL, NULL);
}
