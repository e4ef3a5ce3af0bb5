/*
 * registry_fixture.h: what the registry's unit tests share: a private
 * registry in /dev/shm/shunt-<uid>-test-<pid>/ (never the real one),
 * addresses, counts of the tables' entries, forked children, and files
 * that stand for channels.
 */
#ifndef SHUNT_TESTS_REGISTRY_FIXTURE_H
#define SHUNT_TESTS_REGISTRY_FIXTURE_H

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "registry/registry.h"
#include "registry/registry_file.h"


static char dir[128];

static inline void reg_path(const char *d, char *out, size_t len)
{
    snprintf(out, len, "%s/shunt-%u-%llu-r%u.reg", d, (unsigned)geteuid(), (unsigned long long)reg_netns(),
             REG_VERSION);
}

static inline void rm_dir(const char *d)
{
    DIR *dp = opendir(d);
    if (!dp)
        return;
    struct dirent *de;
    char p[512];
    while ((de = readdir(dp)) != NULL) {
        if (de->d_name[0] == '.' && (de->d_name[1] == 0 || (de->d_name[1] == '.' && de->d_name[2] == 0)))
            continue;
        snprintf(p, sizeof p, "%s/%s", d, de->d_name);
        unlink(p);
    }
    closedir(dp);
    rmdir(d);
}

static inline unsigned dir_entries(const char *d)
{
    DIR *dp = opendir(d);
    CHECK(dp != NULL, ==, 1);
    unsigned n = 0;
    struct dirent *de;
    while ((de = readdir(dp)) != NULL)
        if (de->d_name[0] != '.')
            n++;
    closedir(dp);
    return n;
}

/* An empty registry of our own in d. */
static inline void fresh_at(const char *d)
{
    char p[256];
    reg_close_for_test();
    reg_path(d, p, sizeof p);
    unlink(p);
    CHECK(reg_open_at(d), ==, 0);
    CHECK(reg_mapped() != NULL, ==, 1);
}

static inline void fresh(void)
{
    fresh_at(dir);
}

static inline struct reg_addr A(const char *ip, uint16_t port)
{
    struct reg_addr a;
    if (strchr(ip, ':')) {
        struct sockaddr_in6 s;
        memset(&s, 0, sizeof s);
        s.sin6_family = AF_INET6;
        s.sin6_port = htons(port);
        CHECK(inet_pton(AF_INET6, ip, &s.sin6_addr), ==, 1);
        CHECK(reg_addr_from_sockaddr(&a, (struct sockaddr *)&s, sizeof s), ==, 0);
    } else {
        struct sockaddr_in s;
        memset(&s, 0, sizeof s);
        s.sin_family = AF_INET;
        s.sin_port = htons(port);
        CHECK(inet_pton(AF_INET, ip, &s.sin_addr), ==, 1);
        CHECK(reg_addr_from_sockaddr(&a, (struct sockaddr *)&s, sizeof s), ==, 0);
    }
    return a;
}

static inline unsigned count_listeners(void)
{
    struct reg_file *f = reg_mapped();
    unsigned n = 0;
    for (unsigned i = 0; i < REG_LISTENERS; i++)
        n += atomic_load(&f->listeners[i].state) != REG_FREE;
    return n;
}

static inline unsigned count_conns(void)
{
    struct reg_file *f = reg_mapped();
    unsigned n = 0;
    for (unsigned i = 0; i < REG_CONNS; i++)
        n += atomic_load(&f->conns[i].state) != REG_FREE;
    return n;
}

static inline void wait_ok(pid_t pid)
{
    int st = 0;
    CHECK(waitpid(pid, &st, 0), ==, pid);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        FAIL("child %d: status 0x%x", (int)pid, st);
}

/* A child that runs fn and exits 0 (a failed CHECK exits it with 1). */
static inline pid_t child(void (*fn)(void *), void *arg)
{
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    CHECK(pid, >=, 0);
    if (pid == 0) {
        /* a child holding a lock for ever must not outlive a test that failed */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        fn(arg);
        _exit(0);
    }
    return pid;
}

static inline void run_child(void (*fn)(void *), void *arg)
{
    wait_ok(child(fn, arg));
}

/* A real file in /dev/shm standing for a channel; returns its name. */
static inline const char *make_channel(char *name, size_t len, int n)
{
    char p[160];
    snprintf(name, len, "shunt-%u-test-%d-chan%d", (unsigned)geteuid(), (int)getpid(), n);
    snprintf(p, sizeof p, "/dev/shm/%s", name);
    int fd = open(p, O_CREAT | O_RDWR | O_CLOEXEC, 0600);
    CHECK(fd, >=, 0);
    close(fd);
    return name;
}

static inline bool channel_exists(const char *name)
{
    char p[160];
    snprintf(p, sizeof p, "/dev/shm/%s", name);
    return access(p, F_OK) == 0;
}

static inline struct reg_conn conn(uint64_t inode, struct reg_addr client, struct reg_addr server, const char *chan)
{
    struct reg_conn c;
    memset(&c, 0, sizeof c);
    c.client_inode = inode;
    c.client = client;
    c.server = server;
    snprintf(c.channel, sizeof c.channel, "%s", chan);
    c.client_pid = (int32_t)getpid();
    return c;
}

/* main's set-up and tear-down of the private registry directory. */
static inline void fixture_begin(void)
{
    reg_entries_sweep_interval_s = 0;   /* every open sweeps: the tests count on it (test_registry.c tests the bound) */
    snprintf(dir, sizeof dir, "/dev/shm/shunt-%u-test-%d", (unsigned)geteuid(), (int)getpid());
    rm_dir(dir);
    CHECK(mkdir(dir, 0700), ==, 0);
}

/* The files make_channel made that no test unlinked (they are in /dev/shm
 * itself, where channels are: 174 of them had piled up there). */
static inline void rm_channels(void)
{
    char prefix[64], p[512];
    int n = snprintf(prefix, sizeof prefix, "shunt-%u-test-%d-", (unsigned)geteuid(), (int)getpid());
    DIR *dp = opendir("/dev/shm");
    if (!dp)
        return;
    struct dirent *de;
    while ((de = readdir(dp)) != NULL) {
        if (strncmp(de->d_name, prefix, (size_t)n) != 0)
            continue;
        snprintf(p, sizeof p, "/dev/shm/%s", de->d_name);
        unlink(p);
    }
    closedir(dp);
}

static inline void fixture_end(void)
{
    reg_close_for_test();
    rm_dir(dir);
    rm_channels();
}

#endif
