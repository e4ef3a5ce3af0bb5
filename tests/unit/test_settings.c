/*
 * test_settings.c: unit tests of the SHUNT_* settings (src/base/settings.c).
 *
 * The table itself (names, defaults that parse, text for --help), every
 * setting's default as settings_load gives it, the values each parser
 * accepts (booleans' spellings, log levels, K/M suffixes in either case,
 * powers of two and bounds of the ring sizes, 2^40 for single copy, 1K..1024M
 * for chunks, microseconds up to 1000000), values each refuses (settings_load
 * then returns -1 and err names the setting and the value), err truncated
 * to errlen, and settings_unknown on environments with and without unknown
 * SHUNT_ names.  Links base only.
 *
 * Sizes refused that strtoull and the suffix shift once took: a suffix that
 * carries the value past 64 bits (SHUNT_RING_SIZE=17592186044417M loaded as
 * 1M, SHUNT_SHM_LIMIT=17592186044416M as 0, that is no bound), a negative
 * size (SHUNT_SHM_LIMIT=-1 loaded as 2^64-1), leading blanks and '+'.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "base/settings.h"

extern char **environ;

static struct shunt_settings s;
static char err[512];

/* No SHUNT_* variable at all: the caller's environment must not leak in. */
static void clear_shunt_env(void)
{
    for (;;) {
        char name[256] = "";
        for (char **e = environ; e && *e; e++)
            if (!strncmp(*e, "SHUNT_", 6)) {
                snprintf(name, sizeof name, "%.*s", (int)strcspn(*e, "="), *e);
                break;
            }
        if (!name[0])
            return;
        CHECK_OK(unsetenv(name));
    }
}

/* settings_load into s after poisoning it, so a field it forgets shows. */
static int load(void)
{
    memset(&s, 0xa5, sizeof s);
    memset(err, 0, sizeof err);
    return settings_load(&s, err, sizeof err);
}

/* name=value must load; returns with s filled in, the variable unset again. */
static void load_ok(const char *name, const char *value)
{
    CHECK_OK(setenv(name, value, 1));
    if (load() != 0)
        FAIL("%s=%s refused: %s", name, value, err);
    CHECK_OK(unsetenv(name));
}

/* name=value must be refused, with err naming the setting and the value. */
static void load_bad(const char *name, const char *value)
{
    char want[400];
    CHECK_OK(setenv(name, value, 1));
    if (load() != -1)
        FAIL("%s='%s' accepted", name, value);
    snprintf(want, sizeof want, "bad setting %s=%s:", name, value);
    if (!strstr(err, want))
        FAIL("%s='%s': err '%s' does not say '%s'", name, value, err, want);
    CHECK(strchr(err, '\n'), ==, NULL);     /* one line */
    CHECK(strlen(err), >, strlen(want) + 2); /* and a reason after it */
    CHECK_OK(unsetenv(name));
    /* nothing sticks: the next load is clean */
    CHECK(load(), ==, 0);
}

static const struct setting_def *def_of(const char *name)
{
    for (size_t i = 0; i < shunt_setting_count; i++)
        if (!strcmp(shunt_setting_defs[i].name, name))
            return &shunt_setting_defs[i];
    FAIL("no setting %s in the table", name);
}

static void test_table(void)
{
    static const char *const names[] = {
        "SHUNT_ACCEL", "SHUNT_STRICT", "SHUNT_RING_SIZE", "SHUNT_RING_START", "SHUNT_SHM_LIMIT",
        "SHUNT_ZCOPY_THRESHOLD", "SHUNT_CHUNK_SIZE", "SHUNT_SPIN_US", "SHUNT_YIELD_US", "SHUNT_LOG",
        "SHUNT_LOG_FILE", "SHUNT_SANDBOX_PROBE", "SHUNT_POLL_KERNEL_CALLS", "SHUNT_POLL_KERNEL_US",
        "SHUNT_SHORT_CONNS", "SHUNT_FABRIC", "SHUNT_FABRIC_FORKED", "SHUNT_FABRIC_LANES",
        "SHUNT_SEND_STALL_MS",
    };
    CHECK(shunt_setting_count, ==, sizeof names / sizeof names[0]);
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        (void)def_of(names[i]);
    for (size_t i = 0; i < shunt_setting_count; i++) {
        const struct setting_def *d = &shunt_setting_defs[i];
        CHECK(strncmp(d->name, "SHUNT_", 6), ==, 0);
        CHECK(strncmp(d->name, "SHUNT_TEST_", 11), !=, 0);   /* that prefix is the tests' */
        CHECK(d->def != NULL && d->values != NULL && d->help != NULL && d->parse != NULL, ==, 1);
        CHECK(strlen(d->values), >, 0);
        CHECK(strlen(d->help), >, 20);
        for (size_t k = 0; k < i; k++)
            CHECK(strcmp(shunt_setting_defs[k].name, d->name), !=, 0);
        /* each default parses on its own, as the user would write it */
        struct shunt_settings one;
        char why[200] = "";
        memset(&one, 0, sizeof one);
        if (d->parse(d->def, &one, why, sizeof why) != 0)
            FAIL("default %s=%s: %s", d->name, d->def, why);
    }
}

static void test_defaults(void)
{
    CHECK(load(), ==, 0);
    CHECK(err[0], ==, 0);
    CHECK(s.log_level, ==, LOG_OFF);
    CHECK(s.log_file[0], ==, 0);
    CHECK(s.accel, ==, true);
    CHECK(s.strict, ==, false);
    CHECK(s.ring_size, ==, 1u << 20);
    CHECK(s.ring_start, ==, 16u << 10);
    CHECK(s.shm_limit, ==, 0);
    CHECK(s.zcopy_threshold, ==, 0);
    CHECK(s.chunk_size, ==, 64u << 10);
    CHECK(s.spin_us, ==, 50);
    CHECK(s.yield_us, ==, 100);
    CHECK(s.sandbox_probe, ==, true);
    CHECK(s.poll_kernel_calls, ==, 16);
    CHECK(s.poll_kernel_us, ==, 50);
    CHECK(s.send_stall_ms, ==, 1000);
    /* the table's defaults, as --help shows them, are these */
    CHECK(strcmp(def_of("SHUNT_ACCEL")->def, "1"), ==, 0);
    CHECK(strcmp(def_of("SHUNT_STRICT")->def, "0"), ==, 0);
    CHECK(strcmp(def_of("SHUNT_RING_SIZE")->def, "1M"), ==, 0);
    CHECK(strcmp(def_of("SHUNT_RING_START")->def, "16K"), ==, 0);
    CHECK(strcmp(def_of("SHUNT_SHM_LIMIT")->def, "0"), ==, 0);
    CHECK(strcmp(def_of("SHUNT_ZCOPY_THRESHOLD")->def, "0"), ==, 0);
    CHECK(strcmp(def_of("SHUNT_CHUNK_SIZE")->def, "64K"), ==, 0);
    CHECK(strcmp(def_of("SHUNT_SPIN_US")->def, "50"), ==, 0);
    CHECK(strcmp(def_of("SHUNT_YIELD_US")->def, "100"), ==, 0);
    CHECK(strcmp(def_of("SHUNT_LOG")->def, "off"), ==, 0);
    CHECK(strcmp(def_of("SHUNT_LOG_FILE")->def, ""), ==, 0);
    CHECK(strcmp(def_of("SHUNT_POLL_KERNEL_CALLS")->def, "16"), ==, 0);
    CHECK(strcmp(def_of("SHUNT_POLL_KERNEL_US")->def, "50"), ==, 0);
    CHECK(strcmp(def_of("SHUNT_SHORT_CONNS")->def, "1"), ==, 0);
    CHECK(strcmp(def_of("SHUNT_SEND_STALL_MS")->def, "1000"), ==, 0);
    CHECK(s.short_conns, ==, true);
    CHECK(strcmp(def_of("SHUNT_FABRIC")->def, "1"), ==, 0);
    CHECK(s.fabric, ==, true);
    CHECK(s.fabric_only, ==, false);
    CHECK(strcmp(def_of("SHUNT_FABRIC_FORKED")->def, "0"), ==, 0);
    CHECK(s.fabric_forked, ==, false);
    CHECK(strcmp(def_of("SHUNT_FABRIC_LANES")->def, "^tcp,cma"), ==, 0);
    CHECK(strcmp(s.fabric_lanes, "^tcp,cma"), ==, 0);
    /* an environment without SHUNT_ names loads the same twice */
    struct shunt_settings first = s;
    CHECK(load(), ==, 0);
    CHECK(memcmp(&first, &s, sizeof s), ==, 0);
}

static void test_booleans(void)
{
    static const char *const yes[] = { "1", "yes", "on", "true" };
    static const char *const no[] = { "0", "no", "off", "false" };
    static const char *const bad[] = { "", "2", "-1", "TRUE", "Yes", "ON", "y", "n", "10", "1 ", " 1", "enable" };
    const char *names[] = { "SHUNT_ACCEL", "SHUNT_STRICT" };
    for (size_t n = 0; n < 2; n++) {
        for (size_t i = 0; i < 4; i++) {
            load_ok(names[n], yes[i]);
            CHECK(n == 0 ? s.accel : s.strict, ==, true);
            CHECK(n == 0 ? s.strict : s.accel, ==, n == 0 ? false : true);   /* the other keeps its default */
            load_ok(names[n], no[i]);
            CHECK(n == 0 ? s.accel : s.strict, ==, false);
        }
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
            load_bad(names[n], bad[i]);
    }
    load_ok("SHUNT_SANDBOX_PROBE", "0");
    CHECK(s.sandbox_probe, ==, false);
    load_ok("SHUNT_SANDBOX_PROBE", "yes");
    CHECK(s.sandbox_probe, ==, true);
    load_bad("SHUNT_SANDBOX_PROBE", "2");
    load_ok("SHUNT_SHORT_CONNS", "0");
    CHECK(s.short_conns, ==, false);
    load_ok("SHUNT_SHORT_CONNS", "on");
    CHECK(s.short_conns, ==, true);
    load_bad("SHUNT_SHORT_CONNS", "always");
    load_ok("SHUNT_FABRIC", "0");
    CHECK(s.fabric, ==, false);
    load_bad("SHUNT_FABRIC", "ucx");
    load_ok("SHUNT_FABRIC", "only");
    CHECK(s.fabric && s.fabric_only, ==, true);
    load_ok("SHUNT_FABRIC", "1");
    CHECK(s.fabric && !s.fabric_only, ==, true);
    load_ok("SHUNT_FABRIC_FORKED", "1");
    CHECK(s.fabric_forked, ==, true);
    load_bad("SHUNT_FABRIC_FORKED", "sometimes");
    load_ok("SHUNT_FABRIC_LANES", "tcp");
    CHECK(strcmp(s.fabric_lanes, "tcp"), ==, 0);
    load_ok("SHUNT_FABRIC_LANES", "sysv,posix");
    CHECK(strcmp(s.fabric_lanes, "sysv,posix"), ==, 0);
    load_bad("SHUNT_FABRIC_LANES", "");
    load_bad("SHUNT_FABRIC_LANES", "tcp;rm -rf");
    load_bad("SHUNT_FABRIC_LANES", "TCP");
    CHECK_OK(setenv("SHUNT_ACCEL", "maybe", 1));
    CHECK(load(), ==, -1);
    CHECK(strstr(err, "not a boolean") != NULL, ==, 1);
    CHECK_OK(unsetenv("SHUNT_ACCEL"));
}

static void test_log(void)
{
    static const char *const levels[] = { "off", "error", "warn", "info", "debug", "trace" };
    static const enum log_level want[] = { LOG_OFF, LOG_ERROR, LOG_WARN, LOG_INFO, LOG_DEBUG, LOG_TRACE };
    for (size_t i = 0; i < 6; i++) {
        load_ok("SHUNT_LOG", levels[i]);
        CHECK(s.log_level, ==, want[i]);
    }
    static const char *const bad[] = { "", "INFO", "Info", "warning", "verbose", "0", "5", "info ", "none" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        load_bad("SHUNT_LOG", bad[i]);
    CHECK_OK(setenv("SHUNT_LOG", "loud", 1));
    CHECK(load(), ==, -1);
    CHECK(strstr(err, "not a log level") != NULL, ==, 1);
    CHECK_OK(unsetenv("SHUNT_LOG"));

    /* the file: kept as given (%p is expanded when the log opens, not here) */
    load_ok("SHUNT_LOG_FILE", "/tmp/shunt-%p.log");
    CHECK(strcmp(s.log_file, "/tmp/shunt-%p.log"), ==, 0);
    load_ok("SHUNT_LOG_FILE", "");
    CHECK(s.log_file[0], ==, 0);
    /* the longest path that fits, and one byte more */
    char path[sizeof s.log_file + 1];
    memset(path, 'a', sizeof path);
    path[0] = '/';
    path[sizeof s.log_file - 1] = 0;
    load_ok("SHUNT_LOG_FILE", path);
    CHECK(strlen(s.log_file), ==, sizeof s.log_file - 1);
    CHECK(strcmp(s.log_file, path), ==, 0);
    path[sizeof s.log_file - 1] = 'a';
    path[sizeof s.log_file] = 0;
    load_bad("SHUNT_LOG_FILE", path);
    CHECK_OK(setenv("SHUNT_LOG_FILE", path, 1));
    CHECK(load(), ==, -1);
    CHECK(strstr(err, "SHUNT_LOG_FILE") != NULL, ==, 1);
    CHECK(strstr(err, "longer than 255 bytes") != NULL, ==, 1);
    CHECK_OK(unsetenv("SHUNT_LOG_FILE"));
}

struct size_case {
    const char *v;
    unsigned long long want;
};

static void test_ring_sizes(void)
{
    static const struct size_case ok[] = {
        { "4K", 4096 }, { "4k", 4096 }, { "4096", 4096 }, { "8K", 8192 }, { "16K", 16384 },
        { "64k", 65536 }, { "65536", 65536 }, { "1M", 1 << 20 }, { "1m", 1 << 20 }, { "1024K", 1 << 20 },
        { "2M", 2 << 20 }, { "512M", 512u << 20 }, { "1024M", 1u << 30 }, { "1073741824", 1u << 30 },
        { "1048576K", 1u << 30 },
    };
    static const char *const bad[] = {
        "", "0", "0K", "1", "1K", "2K", "4095", "3K", "12K", "5M", "1000000", "2048M", "2097152K",
        "2147483648", "1G", "1g", "4KB", "4KK", "K", "M", "k4", "4 K", "4.0K", "0x1000", "abc",
        "99999999999999999999999",
    };
    const char *names[] = { "SHUNT_RING_SIZE", "SHUNT_RING_START" };
    for (size_t n = 0; n < 2; n++) {
        for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
            load_ok(names[n], ok[i].v);
            CHECK(n == 0 ? s.ring_size : s.ring_start, ==, ok[i].want);
            CHECK(n == 0 ? s.ring_start : s.ring_size, ==, n == 0 ? 16u << 10 : 1u << 20);
        }
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
            load_bad(names[n], bad[i]);
    }
    CHECK_OK(setenv("SHUNT_RING_SIZE", "3K", 1));
    CHECK(load(), ==, -1);
    CHECK(strstr(err, "3072 is not a power of two between 4K and 1024M") != NULL, ==, 1);
    CHECK_OK(setenv("SHUNT_RING_SIZE", "4Q", 1));
    CHECK(load(), ==, -1);
    CHECK(strstr(err, "optionally followed by K or M") != NULL, ==, 1);
    CHECK_OK(unsetenv("SHUNT_RING_SIZE"));

    /* each is parsed on its own: a start above the size is the ring's business */
    CHECK_OK(setenv("SHUNT_RING_SIZE", "16K", 1));
    CHECK_OK(setenv("SHUNT_RING_START", "64K", 1));
    CHECK(load(), ==, 0);
    CHECK(s.ring_size, ==, 16384);
    CHECK(s.ring_start, ==, 65536);
    CHECK_OK(unsetenv("SHUNT_RING_SIZE"));
    CHECK_OK(unsetenv("SHUNT_RING_START"));
}

static void test_shm_limit(void)
{
    static const struct size_case ok[] = {
        { "0", 0 }, { "1", 1 }, { "100", 100 }, { "3K", 3072 }, { "3k", 3072 }, { "64M", 64ull << 20 },
        { "5m", 5ull << 20 }, { "0M", 0 }, { "4096M", 4096ull << 20 },
        { "18446744073709551615", 18446744073709551615ull },
    };
    static const char *const bad[] = {
        "", "K", "1G", "1T", "1KB", "1.5M", "ten", "18446744073709551616", "1 M", "0x10",
        "17592186044416M", "18014398509481984K", "-1", "-0", " 4K", "+4K", "\t4",
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        load_ok("SHUNT_SHM_LIMIT", ok[i].v);
        CHECK(s.shm_limit, ==, ok[i].want);
    }
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        load_bad("SHUNT_SHM_LIMIT", bad[i]);
}

/* A suffix that wraps must not make a ring size that passes the power-of-two check. */
static void test_size_overflow(void)
{
    load_bad("SHUNT_RING_SIZE", "17592186044417M");
    load_bad("SHUNT_RING_START", "17592186044417M");
    load_bad("SHUNT_CHUNK_SIZE", "17592186044417M");
    load_bad("SHUNT_ZCOPY_THRESHOLD", "17592186044417M");
    load_ok("SHUNT_SHM_LIMIT", "17592186044415M");   /* the largest that fits */
    CHECK(s.shm_limit, ==, 17592186044415ull << 20);
}

static void test_zcopy(void)
{
    static const struct size_case ok[] = {
        { "0", 0 }, { "1", 1 }, { "1000", 1000 }, { "256K", 256 << 10 }, { "1M", 1 << 20 },
        { "1099511627776", 1ull << 40 }, { "1048576M", 1ull << 40 }, { "1073741824K", 1ull << 40 },
    };
    static const char *const bad[] = {
        "", "1099511627777", "1048577M", "2000000000000", "1G", "off", "-", "1MB",
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        load_ok("SHUNT_ZCOPY_THRESHOLD", ok[i].v);
        CHECK(s.zcopy_threshold, ==, ok[i].want);
    }
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        load_bad("SHUNT_ZCOPY_THRESHOLD", bad[i]);
    CHECK_OK(setenv("SHUNT_ZCOPY_THRESHOLD", "1048577M", 1));
    CHECK(load(), ==, -1);
    CHECK(strstr(err, "too large") != NULL, ==, 1);
    CHECK_OK(unsetenv("SHUNT_ZCOPY_THRESHOLD"));
}

static void test_chunk(void)
{
    static const struct size_case ok[] = {
        { "1K", 1024 }, { "1k", 1024 }, { "1024", 1024 }, { "1025", 1025 }, { "3000", 3000 },
        { "64K", 64 << 10 }, { "100k", 100 << 10 }, { "1M", 1 << 20 }, { "1024M", 1u << 30 },
        { "1073741824", 1u << 30 },
    };
    static const char *const bad[] = {
        "", "0", "1", "1023", "1025M", "1073741825", "2048M", "1G", "64KB", "big",
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        load_ok("SHUNT_CHUNK_SIZE", ok[i].v);
        CHECK(s.chunk_size, ==, ok[i].want);
    }
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        load_bad("SHUNT_CHUNK_SIZE", bad[i]);
    CHECK_OK(setenv("SHUNT_CHUNK_SIZE", "1023", 1));
    CHECK(load(), ==, -1);
    CHECK(strstr(err, "1023 is not between 1K and 1024M") != NULL, ==, 1);
    CHECK_OK(unsetenv("SHUNT_CHUNK_SIZE"));
}

static void test_microseconds(void)
{
    static const struct size_case ok[] = {
        { "0", 0 }, { "1", 1 }, { "50", 50 }, { "999999", 999999 }, { "1000000", 1000000 },
    };
    /* no suffixes here: a number of microseconds */
    static const char *const bad[] = {
        "", "1000001", "2000000", "-1", "1K", "1k", "50us", "1.5", "fast", "99999999999999999999999",
    };
    /* and SHUNT_POLL_KERNEL_CALLS, a number of calls, and SHUNT_SEND_STALL_MS, of
     * milliseconds, with the same bounds */
    const char *names[] = { "SHUNT_SPIN_US", "SHUNT_YIELD_US", "SHUNT_POLL_KERNEL_US", "SHUNT_POLL_KERNEL_CALLS",
                            "SHUNT_SEND_STALL_MS" };
    for (size_t n = 0; n < 5; n++) {
        for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
            load_ok(names[n], ok[i].v);
            unsigned got[] = { s.spin_us, s.yield_us, s.poll_kernel_us, s.poll_kernel_calls, s.send_stall_ms };
            unsigned def[] = { 50, 100, 50, 16, 1000 };
            for (size_t k = 0; k < 5; k++)
                CHECK(got[k], ==, k == n ? ok[i].want : def[k]);   /* the others keep their defaults */
        }
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
            load_bad(names[n], bad[i]);
    }
    CHECK_OK(setenv("SHUNT_SPIN_US", "1000001", 1));
    CHECK(load(), ==, -1);
    CHECK(strstr(err, "not a number of microseconds from 0 to 1000000") != NULL, ==, 1);
    CHECK_OK(unsetenv("SHUNT_SPIN_US"));
    CHECK_OK(setenv("SHUNT_POLL_KERNEL_CALLS", "many", 1));
    CHECK(load(), ==, -1);
    CHECK(strstr(err, "SHUNT_POLL_KERNEL_CALLS=many: 'many' is not a number of calls from 0 to 1000000") != NULL, ==, 1);
    CHECK_OK(unsetenv("SHUNT_POLL_KERNEL_CALLS"));
}

/* Several at once; a bad one anywhere fails the load; err fits errlen. */
static void test_together(void)
{
    CHECK_OK(setenv("SHUNT_ACCEL", "0", 1));
    CHECK_OK(setenv("SHUNT_LOG", "debug", 1));
    CHECK_OK(setenv("SHUNT_RING_SIZE", "256K", 1));
    CHECK_OK(setenv("SHUNT_SPIN_US", "0", 1));
    CHECK_OK(setenv("SHUNT_CHUNK_SIZE", "8K", 1));
    CHECK(load(), ==, 0);
    CHECK(s.accel, ==, false);
    CHECK(s.log_level, ==, LOG_DEBUG);
    CHECK(s.ring_size, ==, 256 << 10);
    CHECK(s.spin_us, ==, 0);
    CHECK(s.chunk_size, ==, 8 << 10);
    CHECK(s.ring_start, ==, 16 << 10);   /* the rest: defaults */
    CHECK(s.yield_us, ==, 100);

    /* a bad one among good ones, and two bad ones: -1, naming a bad one */
    CHECK_OK(setenv("SHUNT_YIELD_US", "soon", 1));
    CHECK(load(), ==, -1);
    CHECK(strstr(err, "SHUNT_YIELD_US=soon") != NULL, ==, 1);
    CHECK_OK(setenv("SHUNT_STRICT", "perhaps", 1));
    CHECK(load(), ==, -1);
    CHECK(strstr(err, "SHUNT_YIELD_US=soon") != NULL || strstr(err, "SHUNT_STRICT=perhaps") != NULL, ==, 1);

    /* err is cut to errlen, always terminated, never written past */
    char small[24];
    memset(small, 'x', sizeof small);
    CHECK(settings_load(&s, small, 16), ==, -1);
    CHECK(strlen(small), ==, 15);
    CHECK(small[16], ==, 'x');
    CHECK(strncmp(small, "shunt: bad sett", 15), ==, 0);
    clear_shunt_env();
    CHECK(load(), ==, 0);
}

static void test_unknown(void)
{
    char name[64];
    char *none[] = { "PATH=/bin", "HOME=/root", "SHUNT_ACCEL=1", "SHUNT_LOG_FILE=/x", "SHUNT_TEST_MODE=plain",
                     "SHUNT_TEST_ANYTHING=1", "XSHUNT_FOO=1", "shunt_foo=1", "SHUNTX=1", NULL };
    CHECK(settings_unknown(none, name, sizeof name), ==, NULL);
    char *empty[] = { NULL };
    CHECK(settings_unknown(empty, name, sizeof name), ==, NULL);
    CHECK(settings_unknown(NULL, name, sizeof name), ==, NULL);
    /* every name of the table is known */
    for (size_t i = 0; i < shunt_setting_count; i++) {
        char entry[128];
        snprintf(entry, sizeof entry, "%s=whatever", shunt_setting_defs[i].name);
        char *env[] = { entry, NULL };
        CHECK(settings_unknown(env, name, sizeof name), ==, NULL);
    }

    struct {
        const char *entry, *want;
    } cases[] = {
        { "SHUNT_FOO=1", "SHUNT_FOO" },
        { "SHUNT_ACCELX=1", "SHUNT_ACCELX" },     /* a known name's prefix is not enough */
        { "SHUNT_ACCE=1", "SHUNT_ACCE" },
        { "SHUNT_ACCEL_=1", "SHUNT_ACCEL_" },
        { "SHUNT_accel=1", "SHUNT_accel" },       /* names are case-sensitive */
        { "SHUNT_=1", "SHUNT_" },
        { "SHUNT_TEST=1", "SHUNT_TEST" },         /* only SHUNT_TEST_ is the tests' */
        { "SHUNT_TESTS_X=1", "SHUNT_TESTS_X" },
        { "SHUNT_NOVALUE", "SHUNT_NOVALUE" },     /* no '=': the whole entry */
        { "SHUNT_EMPTY=", "SHUNT_EMPTY" },
        { "SHUNT_RING=1=2", "SHUNT_RING" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *env[] = { "PATH=/bin", "SHUNT_ACCEL=1", (char *)cases[i].entry, "SHUNT_LOG=info", NULL };
        memset(name, 0, sizeof name);
        const char *got = settings_unknown(env, name, sizeof name);
        if (got != name || strcmp(name, cases[i].want))
            FAIL("settings_unknown(%s): got %s, want %s", cases[i].entry, got ? got : "NULL", cases[i].want);
    }
    /* the first unknown one is named */
    char *two[] = { "SHUNT_FIRST=1", "SHUNT_SECOND=2", NULL };
    CHECK(settings_unknown(two, name, sizeof name), ==, name);
    CHECK(strcmp(name, "SHUNT_FIRST"), ==, 0);
    /* cut to namelen, terminated, never written past */
    char small[12];
    memset(small, 'x', sizeof small);
    char *longname[] = { "SHUNT_VERY_LONG_NAME=1", NULL };
    CHECK(settings_unknown(longname, small, 8), ==, small);
    CHECK(strcmp(small, "SHUNT_V"), ==, 0);
    CHECK(small[8], ==, 'x');
    /* the real environment: our own test variables are fine, a typo is not */
    CHECK_OK(setenv("SHUNT_TEST_MODE", "unit", 1));
    CHECK(settings_unknown(environ, name, sizeof name), ==, NULL);
    CHECK_OK(setenv("SHUNT_RINGSIZE", "1M", 1));
    CHECK(settings_unknown(environ, name, sizeof name), ==, name);
    CHECK(strcmp(name, "SHUNT_RINGSIZE"), ==, 0);
    CHECK(load(), ==, 0);   /* settings_load ignores unknown names */
    clear_shunt_env();
}

int main(void)
{
    clear_shunt_env();
    test_table();
    test_defaults();
    test_booleans();
    test_log();
    test_ring_sizes();
    test_shm_limit();
    test_size_overflow();
    test_zcopy();
    test_chunk();
    test_microseconds();
    test_together();
    test_unknown();
    printf("test_settings: ok\n");
    PASS();
}
