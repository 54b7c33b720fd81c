/*
 * mmap_test: dpu_mmap against two live hosts sharing memory.
 *
 * Run by go test ./hostif/c/ with DPU_SOCKET (host 1) and
 * DPU_TEST_PEER_SOCKET (host 2) set, and once more with DPU_UFFD=user (the
 * userfaultfd kind an unprivileged process gets when
 * vm.unprivileged_userfaultfd is 0). Prints "ok" and exits 0 when
 * everything holds; names the failing check otherwise.
 */
#define _GNU_SOURCE
#include "dpu.h"

#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int checks;

#define CHECK(cond)                                                                                          \
    do {                                                                                                     \
        checks++;                                                                                            \
        if (!(cond)) {                                                                                       \
            fprintf(stderr, "%s:%d: check failed: %s (last error: %s)\n", __FILE__, __LINE__, #cond,         \
                    dpu_last_error());                                                                       \
            exit(1);                                                                                         \
        }                                                                                                    \
    } while (0)

#define OK(call)                                                                                             \
    do {                                                                                                     \
        int rc_ = (call);                                                                                    \
        checks++;                                                                                            \
        if (rc_ != 0) {                                                                                      \
            fprintf(stderr, "%s:%d: %s = %d (%s; %s)\n", __FILE__, __LINE__, #call, rc_, dpu_strerror(rc_), \
                    dpu_last_error());                                                                       \
            exit(1);                                                                                         \
        }                                                                                                    \
    } while (0)

struct shared {
    uint64_t counter; /* atomics from the peer */
    uint64_t plain;   /* plain writes through the mapping */
    char text[64];
    uint64_t tail[2]; /* at the end of the first page, see below */
};

static dpu_t *open_at(const char *env) {
    dpu_t *d;
    OK(dpu_open(getenv(env), &d));
    dpu_set_timeout(d, 5000);
    return d;
}

static uint64_t peer_load(dpu_t *p, dpu_gva_t g) {
    uint64_t v = 0;
    OK(dpu_load64(p, g, &v));
    return v;
}

/* child runs fn in a child process and returns the signal that ended it
 * (0 when it exited 0, -1 otherwise). */
static int child(void (*fn)(void *), void *arg) {
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        fn(arg);
        _exit(0);
    }
    int st;
    CHECK(waitpid(pid, &st, 0) == pid);
    if (WIFSIGNALED(st)) return WTERMSIG(st);
    return WEXITSTATUS(st) == 0 ? 0 : -1;
}

/* Writes through the mapping reach the owner at a release point; bytes the
 * peer changed meanwhile by atomics are kept. */
static void test_write_back(dpu_t *d, dpu_t *p) {
    dpu_gva_t g;
    OK(dpu_alloc(d, 2 * DPU_PAGE_SIZE, &g));
    void *at;
    OK(dpu_mmap(d, g, 2 * DPU_PAGE_SIZE, PROT_READ | PROT_WRITE, &at));
    struct shared *s = at;
    CHECK(s->counter == 0 && s->plain == 0); /* first touch: a read fault */
    s->plain = 41;                            /* a write fault: writable here */
    s->plain++;
    strcpy(s->text, "written through dpu_mmap");
    ((uint64_t *)at)[DPU_PAGE_SIZE / 8 + 3] = 7; /* second page */
    uint64_t old;
    OK(dpu_fetch_add64(p, g, 5, &old)); /* the peer, on the same page */
    CHECK(peer_load(p, dpu_gva_add(g, 8)) == 0); /* not yet written back */
    dpu_location_t loc;
    OK(dpu_locate(p, g, &loc));
    CHECK(loc.owner == dpu_machine(d)); /* the write made this node the owner */
    dpu_mmap_sync(DPU_SYNC_RELEASE);
    CHECK(peer_load(p, dpu_gva_add(g, 8)) == 42);
    CHECK(peer_load(p, g) == 5); /* the peer's add survived the write-back */
    CHECK(peer_load(p, dpu_gva_add(g, DPU_PAGE_SIZE + 24)) == 7);
    char text[64];
    OK(dpu_load(p, dpu_gva_add(g, 16), text, sizeof text));
    CHECK(strcmp(text, "written through dpu_mmap") == 0);

    /* After an acquire point the mapping shows the peer's writes. */
    OK(dpu_store64(p, dpu_gva_add(g, 8), 100));
    dpu_mmap_sync(DPU_SYNC_ACQUIRE);
    CHECK(s->plain == 100 && s->counter == 5);

    dpu_mmap_info_t info[4];
    CHECK(dpu_mmap_list(info, 4) == 1);
    CHECK(info[0].addr == at && info[0].len == 2 * DPU_PAGE_SIZE && info[0].read_faults >= 2 &&
          info[0].write_faults >= 2 && info[0].writebacks >= 2);
    OK(dpu_munmap(d, at, 2 * DPU_PAGE_SIZE));
    CHECK(dpu_mmap_list(info, 4) == 0);
    CHECK(dpu_munmap(d, at, 2 * DPU_PAGE_SIZE) == -EINVAL);
    OK(dpu_free(d, g));
}

/* A page written here is owned here; when the peer takes it, what was
 * written reaches the peer, the page is unmapped here, and the next touch
 * fetches the peer's content. Then a write takes it back. */
static void test_ownership_lost(dpu_t *d, dpu_t *p) {
    dpu_gva_t g;
    OK(dpu_alloc_mode(p, DPU_PAGE_SIZE, 0666, &g)); /* the peer's page */
    void *at;
    OK(dpu_mmap(d, g, DPU_PAGE_SIZE, PROT_READ | PROT_WRITE, &at));
    volatile uint64_t *w = at;
    w[1] = 11; /* write fault: ownership moves here */
    dpu_location_t loc;
    OK(dpu_locate(d, g, &loc));
    CHECK(loc.owner == dpu_machine(d));
    w[2] = 12; /* dirty, not yet written back */
    OK(dpu_acquire(p, g, 5000)); /* the peer takes the page */
    dpu_mmap_info_t info;
    for (int i = 0; i < 500; i++) {
        CHECK(dpu_mmap_list(&info, 1) == 1);
        if (info.losses > 0) break;
        struct timespec t = {0, 10000000};
        nanosleep(&t, NULL);
    }
    CHECK(info.losses == 1 && info.acquisitions == 1);
    CHECK(peer_load(p, dpu_gva_add(g, 8)) == 11 && peer_load(p, dpu_gva_add(g, 16)) == 12);
    OK(dpu_store64(p, dpu_gva_add(g, 24), 13));
    CHECK(w[3] == 13 && w[1] == 11); /* unmapped at the loss: fetched again */
    OK(dpu_release(p, g));
    w[3] = 14; /* takes it back */
    CHECK(dpu_mmap_list(&info, 1) == 1 && info.acquisitions == 2);
    OK(dpu_locate(p, g, &loc));
    CHECK(loc.owner == dpu_machine(d));
    dpu_mmap_sync(DPU_SYNC_RELEASE);
    CHECK(peer_load(p, dpu_gva_add(g, 24)) == 14);
    OK(dpu_munmap(d, at, DPU_PAGE_SIZE));
    /* The page is owned here now; an agent frees only pages it owns. */
    OK(dpu_acquire(p, g, 5000));
    OK(dpu_release(p, g));
    OK(dpu_free(p, g));
}

/* Unmodified code under dpu_lock on one host, read under the lock on the
 * other: every increment is seen. */
static void test_lock(dpu_t *d, dpu_t *p) {
    dpu_gva_t g;
    OK(dpu_alloc_mode(d, DPU_PAGE_SIZE, 0666, &g));
    void *a, *b;
    OK(dpu_mmap(d, g, DPU_PAGE_SIZE, PROT_READ | PROT_WRITE, &a));
    OK(dpu_mmap(p, g, DPU_PAGE_SIZE, PROT_READ | PROT_WRITE, &b));
    struct shared *sa = a, *sb = b;
    for (int i = 0; i < 20; i++) {
        dpu_t *who = i % 2 ? p : d;
        struct shared *s = i % 2 ? sb : sa;
        OK(dpu_lock(who, g));
        CHECK(s->plain == (uint64_t)i);
        s->plain++;
        snprintf(s->text, sizeof s->text, "step %d", i);
        OK(dpu_unlock(who, g));
    }
    OK(dpu_lock(d, g));
    CHECK(sa->plain == 20 && strcmp(sa->text, "step 19") == 0);
    OK(dpu_unlock(d, g));
    OK(dpu_munmap(p, b, DPU_PAGE_SIZE));
    OK(dpu_munmap(d, a, DPU_PAGE_SIZE));
    OK(dpu_free(d, g));
}

/* Without an acquire, a clean page is dropped when the node reports that
 * it changed, so a reader polling the mapping sees a peer's store. */
static void test_update_event(dpu_t *d, dpu_t *p) {
    dpu_gva_t g;
    OK(dpu_alloc(d, DPU_PAGE_SIZE, &g));
    void *at;
    OK(dpu_mmap(d, g, DPU_PAGE_SIZE, PROT_READ, &at));
    volatile uint64_t *w = at;
    CHECK(*w == 0);
    OK(dpu_store64(p, g, 9));
    for (int i = 0; i < 500 && *w != 9; i++) {
        struct timespec t = {0, 2000000};
        nanosleep(&t, NULL);
    }
    CHECK(*w == 9);
    OK(dpu_munmap(d, at, DPU_PAGE_SIZE));
    OK(dpu_free(d, g));
}

struct bad {
    dpu_gva_t g;
    void *at;
    int what;
};

static void bad_child(void *arg) {
    struct bad *b = arg;
    volatile uint64_t *w = b->at;
    switch (b->what) {
    case 0: (void)*w; break;  /* inherited across fork? (it is not) */
    case 1: *w = 1; break;    /* a read-only mapping */
    case 2: { /* the node is lost: its sockets end under the mapping */
        int mark = dup(0);
        close(mark);
        dpu_t *p = open_at("DPU_TEST_PEER_SOCKET");
        void *at;
        OK(dpu_mmap(p, b->g, DPU_PAGE_SIZE, PROT_READ | PROT_WRITE, &at));
        for (int fd = mark; fd < mark + 64; fd++) {
            struct stat st;
            if (fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode)) shutdown(fd, SHUT_RDWR);
        }
        (void)*(volatile uint64_t *)at;
        break;
    }
    case 3: (void)*w; break;  /* after dpu_munmap */
    }
}

static void test_bad(dpu_t *d) {
    dpu_gva_t g;
    OK(dpu_alloc(d, DPU_PAGE_SIZE, &g));
    void *at;
    OK(dpu_mmap(d, g, DPU_PAGE_SIZE, PROT_READ, &at));
    CHECK(*(volatile uint64_t *)at == 0);
    struct bad b = {g, at, 0};
    CHECK(child(bad_child, &b) == SIGSEGV);
    b.what = 1;
    CHECK(child(bad_child, &b) == SIGSEGV);
    CHECK(*(volatile uint64_t *)at == 0); /* the parent's mapping is intact */
    OK(dpu_munmap(d, at, DPU_PAGE_SIZE));
    b.what = 3;
    CHECK(child(bad_child, &b) == SIGSEGV);
    b.what = 2;
    CHECK(child(bad_child, &b) == SIGBUS);
    /* The child's node gives its replica of g back once it sees the
     * child's connection end, after the child is gone: until its unref
     * reaches the owner, the free is refused as busy. */
    int rc;
    for (int tries = 0; (rc = dpu_free(d, g)) == -EBUSY && tries < 500; tries++) usleep(10000);
    OK(rc);
    CHECK(dpu_mmap(d, g, DPU_PAGE_SIZE, PROT_READ, &at) < 0); /* freed: no ref */
    CHECK(dpu_mmap(d, dpu_gva_add(g, 8), DPU_PAGE_SIZE, PROT_READ, &at) == -EINVAL);
    CHECK(dpu_mmap(d, g, DPU_PAGE_SIZE, PROT_EXEC, &at) == -EINVAL);
}

/* hold: map two pages, read one, write the other, say where, and keep the
 * mapping until stdin ends (the Go test reads the agent's maps meanwhile). */
static int hold(void) {
    dpu_t *d = open_at("DPU_SOCKET");
    dpu_gva_t g;
    OK(dpu_alloc(d, 2 * DPU_PAGE_SIZE, &g));
    void *at;
    OK(dpu_mmap(d, g, 2 * DPU_PAGE_SIZE, PROT_READ | PROT_WRITE, &at));
    volatile uint64_t *w = at;
    (void)w[0];
    w[DPU_PAGE_SIZE / 8] = 1;
    char text[DPU_GVA_TEXT_LEN + 1];
    dpu_gva_format(g, text, sizeof text);
    printf("mapped %p %s\n", at, text);
    fflush(stdout);
    char buf[16];
    while (fread(buf, 1, sizeof buf, stdin) > 0) {
    }
    OK(dpu_munmap(d, at, 2 * DPU_PAGE_SIZE));
    dpu_close(d);
    return 0;
}

/* stall: map two pages with a 1 s timeout, read the first, say "ready GVA",
 * and when stdin gives a line (the Go test has stalled the node meanwhile)
 * touch the second: the fault must end in SIGBUS within the timeout, not
 * hang. With DPU_TEST_PEER_SOCKET the pages are the peer's (the Go test
 * kills the peer's agent instead). Exits 0 only if the touch went through, which it must not. */
static int stall(int write) {
    dpu_t *d = open_at("DPU_SOCKET");
    dpu_gva_t g;
    if (getenv("DPU_TEST_PEER_SOCKET")) { /* the pages' owner is the peer */
        dpu_t *p = open_at("DPU_TEST_PEER_SOCKET");
        OK(dpu_alloc_mode(p, 2 * DPU_PAGE_SIZE, 0666, &g));
        dpu_close(p);
    } else {
        OK(dpu_alloc(d, 2 * DPU_PAGE_SIZE, &g));
    }
    dpu_set_timeout(d, getenv("DPU_TEST_TIMEOUT_MS") ? atoi(getenv("DPU_TEST_TIMEOUT_MS")) : 1000);
    void *at;
    OK(dpu_mmap(d, g, 2 * DPU_PAGE_SIZE, PROT_READ | PROT_WRITE, &at));
    volatile uint64_t *w = at;
    CHECK(w[0] == 0);
    char text[DPU_GVA_TEXT_LEN + 1];
    dpu_gva_format(g, text, sizeof text);
    printf("ready %s\n", text);
    fflush(stdout);
    char line[16];
    if (!fgets(line, sizeof line, stdin)) return 2;
    if (write) w[DPU_PAGE_SIZE / 8] = 1;
    else (void)w[DPU_PAGE_SIZE / 8];
    printf("touched\n");
    return 0;
}

/* forked: fork and exit next to a mapping. The process maps two pages of
 * the peer and writes the first (ownership and an acquisition here), then
 * forks children that map the same pages on a connection of their own:
 * one writes both pages, closes the handle it inherited (which must not
 * end the parent's connection) and exits without unmapping (exit writes
 * back); the other writes and is killed (its writes are lost, its refs and
 * acquisitions go with its connections). Between the steps it prints a
 * line and waits for one on stdin, so that the Go test can count the
 * node's refs and acquisitions:
 *   "mapped GVA"    the parent's mapping alone
 *   "children"      both children gone
 *   "unmapped"      nothing mapped any more */
static void wait_line(const char *say) {
    printf("%s\n", say);
    fflush(stdout);
    char line[16];
    if (!fgets(line, sizeof line, stdin)) exit(2);
}

static int fork_child(dpu_t *inherited, dpu_gva_t g, int kill_self) {
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        dpu_t *c = open_at("DPU_SOCKET");
        void *at;
        OK(dpu_mmap(c, g, 2 * DPU_PAGE_SIZE, PROT_READ | PROT_WRITE, &at));
        volatile uint64_t *w = at;
        w[1] = kill_self ? 99 : 2;
        w[DPU_PAGE_SIZE / 8 + 1] = kill_self ? 99 : 3;
        if (kill_self) raise(SIGKILL);
        dpu_close(inherited); /* the parent's connection: only this process's handle goes */
        exit(0);              /* no dpu_munmap, no dpu_close(c): exit writes back */
    }
    int st;
    CHECK(waitpid(pid, &st, 0) == pid);
    if (WIFSIGNALED(st)) return WTERMSIG(st);
    return WEXITSTATUS(st) == 0 ? 0 : -1;
}

static int forked(void) {
    dpu_t *d = open_at("DPU_SOCKET"), *p = open_at("DPU_TEST_PEER_SOCKET");
    dpu_gva_t g;
    OK(dpu_alloc_mode(p, 2 * DPU_PAGE_SIZE, 0666, &g));
    void *at;
    OK(dpu_mmap(d, g, 2 * DPU_PAGE_SIZE, PROT_READ | PROT_WRITE, &at));
    volatile uint64_t *w = at;
    w[0] = 1;                           /* owned here, dirty */
    (void)w[DPU_PAGE_SIZE / 8];         /* present, clean */
    char text[DPU_GVA_TEXT_LEN + 8];
    memcpy(text, "mapped ", 7);
    dpu_gva_format(g, text + 7, DPU_GVA_TEXT_LEN + 1);
    wait_line(text);

    CHECK(fork_child(d, g, 0) == 0);
    CHECK(fork_child(d, g, 1) == SIGKILL);
    dpu_mmap_sync(DPU_SYNC_RELEASE | DPU_SYNC_ACQUIRE);
    CHECK(w[0] == 1);                                     /* the parent's own write */
    CHECK(w[1] == 2 && w[DPU_PAGE_SIZE / 8 + 1] == 3);   /* the exited child's, written back at its exit */
    w[2] = 4;                                             /* the parent's connection still works */
    dpu_mmap_sync(DPU_SYNC_RELEASE);
    CHECK(peer_load(p, dpu_gva_add(g, 16)) == 4 && peer_load(p, dpu_gva_add(g, 8)) == 2);
    CHECK(peer_load(d, dpu_gva_add(g, 16)) == 4); /* and so does the handle a child closed */
    dpu_mmap_info_t info;
    CHECK(dpu_mmap_list(&info, 1) == 1 && info.acquisitions >= 1);
    wait_line("children");

    OK(dpu_munmap(d, at, 2 * DPU_PAGE_SIZE));
    CHECK(dpu_mmap_list(&info, 1) == 0);
    wait_line("unmapped");
    OK(dpu_acquire(p, g, 5000)); /* the peer frees only pages it owns */
    OK(dpu_release(p, g));
    OK(dpu_acquire(p, dpu_gva_add(g, DPU_PAGE_SIZE), 5000));
    OK(dpu_release(p, dpu_gva_add(g, DPU_PAGE_SIZE)));
    OK(dpu_free(p, g));
    dpu_close(d);
    dpu_close(p);
    printf("ok %d checks\n", checks);
    return 0;
}

/* readonly: map one page PROT_READ, pass an acquire point and read the
 * page (a fenced fault), printing "read VALUE". Run by the Go test as a
 * user who may read the page but not write it: the fence (a CAS) is
 * refused, the read goes on unfenced, with a logged warning. */
static int readonly(int argc, char **argv) {
    if (argc != 3) return 2;
    dpu_gva_t g;
    OK(dpu_gva_parse(argv[2], &g));
    dpu_t *d = open_at("DPU_SOCKET");
    void *at;
    OK(dpu_mmap(d, g, DPU_PAGE_SIZE, PROT_READ, &at));
    dpu_mmap_sync(DPU_SYNC_ACQUIRE);
    printf("read %llu\n", (unsigned long long)*(volatile uint64_t *)at);
    OK(dpu_munmap(d, at, DPU_PAGE_SIZE));
    dpu_close(d);
    return 0;
}

/* pass: release/acquire across two pages, as C11 code does it through
 * dpu-cc. The writer fills a block on the data page with plain stores, then
 * (a release) writes the block back and stores the round number in the flag
 * page; the reader waits for the round with loads of the flag (an acquire
 * after it), then reads the block through its mapping: every word must be
 * the round's. The Go test puts the data page's owner, the flag page's
 * owner and the two processes where the data page's updates take a longer
 * path to the reader than the flag does.
 *
 *   mmap_test pass-write|pass-read DATA-GVA FLAG-GVA ROUNDS
 *
 * The reader prints "stale K of N rounds" and exits 1 if K > 0. */
#define PASS_WORDS 256

static int wait64(dpu_t *d, dpu_gva_t g, uint64_t want) {
    for (int i = 0; i < 200000; i++) { /* 200000 x 50 us: 10 s at least */
        uint64_t v = 0;
        OK(dpu_load64(d, g, &v));
        if (v >= want) return 0;
        struct timespec t = {0, 50000};
        nanosleep(&t, NULL);
    }
    fprintf(stderr, "mmap_test: gave up waiting for %llu\n", (unsigned long long)want);
    return -1;
}

static int pass(int argc, char **argv, int writer) {
    if (argc != 5) {
        fprintf(stderr, "usage: mmap_test pass-write|pass-read DATA-GVA FLAG-GVA ROUNDS\n");
        return 2;
    }
    dpu_gva_t data, flag;
    OK(dpu_gva_parse(argv[2], &data));
    OK(dpu_gva_parse(argv[3], &flag));
    int rounds = atoi(argv[4]);
    dpu_t *d = open_at("DPU_SOCKET");
    void *at;
    OK(dpu_mmap(d, data, DPU_PAGE_SIZE, PROT_READ | PROT_WRITE, &at));
    volatile uint64_t *blk = at;
    dpu_gva_t round = flag, ack = dpu_gva_add(flag, 8);
    (void)blk[0]; /* both nodes hold the data page before the first round */
    OK(dpu_store64(d, writer ? dpu_gva_add(flag, 16) : dpu_gva_add(flag, 24), 1));
    if (wait64(d, writer ? dpu_gva_add(flag, 24) : dpu_gva_add(flag, 16), 1) < 0) return 1;
    int stale = 0;
    for (uint64_t r = 1; r <= (uint64_t)rounds; r++) {
        if (writer) {
            for (int w = 0; w < PASS_WORDS; w++) blk[w] = r * 1000 + (uint64_t)w;
            dpu_mmap_sync(DPU_SYNC_RELEASE); /* release: the block first */
            OK(dpu_store64(d, round, r));
            if (wait64(d, ack, r) < 0) return 1;
            dpu_mmap_sync(DPU_SYNC_RELEASE | DPU_SYNC_ACQUIRE);
        } else {
            if (wait64(d, round, r) < 0) return 1;
            dpu_mmap_sync(DPU_SYNC_RELEASE | DPU_SYNC_ACQUIRE); /* acquire */
            for (int w = 0; w < PASS_WORDS; w++) {
                if (blk[w] != r * 1000 + (uint64_t)w) {
                    if (stale++ < 5)
                        fprintf(stderr, "mmap_test: round %llu: word %d is %llu after the acquire\n",
                                (unsigned long long)r, w, (unsigned long long)blk[w]);
                    break;
                }
            }
            dpu_mmap_sync(DPU_SYNC_RELEASE);
            OK(dpu_store64(d, ack, r));
        }
    }
    dpu_mmap_info_t info;
    CHECK(dpu_mmap_list(&info, 1) == 1);
    printf("%s: stale %d of %d rounds; %llu read faults, %llu write faults, %llu acquisitions\n",
           writer ? "writer" : "reader", stale, rounds, (unsigned long long)info.read_faults,
           (unsigned long long)info.write_faults, (unsigned long long)info.acquisitions);
    OK(dpu_munmap(d, at, DPU_PAGE_SIZE));
    dpu_close(d);
    return stale ? 1 : 0;
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "hold") == 0) return hold();
    if (argc > 1 && strcmp(argv[1], "stall-read") == 0) return stall(0);
    if (argc > 1 && strcmp(argv[1], "stall-write") == 0) return stall(1);
    if (argc > 1 && strcmp(argv[1], "fork") == 0) return forked();
    if (argc > 1 && strcmp(argv[1], "readonly") == 0) return readonly(argc, argv);
    if (argc > 1 && strcmp(argv[1], "pass-write") == 0) return pass(argc, argv, 1);
    if (argc > 1 && strcmp(argv[1], "pass-read") == 0) return pass(argc, argv, 0);
    dpu_t *d = open_at("DPU_SOCKET"), *p = open_at("DPU_TEST_PEER_SOCKET");
    test_write_back(d, p);
    test_ownership_lost(d, p);
    test_lock(d, p);
    test_update_event(d, p);
    test_bad(d);
    /* dpu_close drops areas still mapped (their refs go with the
     * connection); a mapping left here must not leak past it. */
    dpu_gva_t g;
    OK(dpu_alloc(d, DPU_PAGE_SIZE, &g));
    void *at;
    OK(dpu_mmap(d, g, DPU_PAGE_SIZE, PROT_READ | PROT_WRITE, &at));
    *(uint64_t *)at = 3;
    dpu_close(d);
    dpu_mmap_info_t info;
    CHECK(dpu_mmap_list(&info, 1) == 0);
    CHECK(peer_load(p, g) == 3); /* written back on close */
    dpu_close(p);
    printf("ok %d checks\n", checks);
    return 0;
}
