/*
 * shared_page.h — where the C11 examples get their shared page, and how
 * their parties start. The only part of them that knows about dpu.
 *
 * Built with dpu-cc (__DPU_CC__ defined): the program is one party; its
 * arguments name the shared area (the GVA of AREA_BYTES, two pages) and the
 * party's number, and the area is mapped with dpu_mmap through the node at
 * $DPU_SOCKET; with GVA2 the first page is GVA's and the second GVA2's (two
 * allocations, which may live on different nodes). Run one process per
 * party, on any nodes. At the end each party prints its areas' fault and
 * ownership counters on stderr.
 *
 * Built with plain cc: the area is an anonymous shared mapping and the
 * program forks every party itself, on this host.
 *
 *   PROG PARTIES ITERATIONS [GVA PARTY [GVA2]]
 */
#ifndef SHARED_PAGE_H
#define SHARED_PAGE_H

#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
#ifdef __DPU_CC__
#include "dpu.h"
#endif

#define PAGE_BYTES 4096
#define AREA_BYTES (2 * PAGE_BYTES)

/* party runs one party on the two pages; it returns the exit status. */
static int party(void *first, void *second, long me, long parties, long iterations);

static long number(const char *prog, const char *s) {
    char *end;
    long v = strtol(s, &end, 0);
    if (*s == '\0' || *end != '\0' || v < 0) {
        fprintf(stderr, "%s: %s: want a number\n", prog, s);
        exit(2);
    }
    return v;
}

int main(int argc, char **argv) {
#ifdef __DPU_CC__
    if (argc != 5 && argc != 6) {
        fprintf(stderr, "usage: %s PARTIES ITERATIONS GVA PARTY [GVA2]\n", argv[0]);
        return 2;
    }
    long parties = number(argv[0], argv[1]), iterations = number(argv[0], argv[2]);
    long me = number(argv[0], argv[4]);
    size_t first_len = argc == 6 ? PAGE_BYTES : AREA_BYTES;
    dpu_gva_t g, g2;
    dpu_t *d;
    void *page, *second = NULL;
    int rc = dpu_gva_parse(argv[3], &g);
    if (rc == 0 && argc == 6) rc = dpu_gva_parse(argv[5], &g2);
    if (rc == 0) rc = dpu_open(NULL, &d);
    if (rc == 0) rc = dpu_mmap(d, g, first_len, PROT_READ | PROT_WRITE, &page);
    if (rc == 0 && argc == 6) rc = dpu_mmap(d, g2, PAGE_BYTES, PROT_READ | PROT_WRITE, &second);
    if (rc < 0) {
        fprintf(stderr, "%s: mapping %s: %s (%s)\n", argv[0], argv[3], dpu_strerror(rc), dpu_last_error());
        return 1;
    }
    int status = party(page, second ? second : (char *)page + PAGE_BYTES, me, parties, iterations);
    dpu_mmap_info_t infos[2], info = {0};
    int n = dpu_mmap_list(infos, 2);
    for (int k = 0; k < n && k < 2; k++) {
        info.read_faults += infos[k].read_faults;
        info.write_faults += infos[k].write_faults;
        info.writebacks += infos[k].writebacks;
        info.drops += infos[k].drops;
        info.acquisitions += infos[k].acquisitions;
        info.losses += infos[k].losses;
    }
    if (n >= 1)
        fprintf(stderr,
                "%s: party %ld: %llu read faults, %llu write faults, %llu write-backs, %llu drops, "
                "%llu ownership acquisitions, %llu losses\n",
                argv[0], me, (unsigned long long)info.read_faults, (unsigned long long)info.write_faults,
                (unsigned long long)info.writebacks, (unsigned long long)info.drops,
                (unsigned long long)info.acquisitions, (unsigned long long)info.losses);
    if ((rc = dpu_munmap(d, page, first_len)) < 0 || (second && (rc = dpu_munmap(d, second, PAGE_BYTES)) < 0)) {
        fprintf(stderr, "%s: unmapping: %s\n", argv[0], dpu_strerror(rc));
        status = 1;
    }
    dpu_close(d);
    return status;
#else
    if (argc != 3) {
        fprintf(stderr, "usage: %s PARTIES ITERATIONS\n", argv[0]);
        return 2;
    }
    long parties = number(argv[0], argv[1]), iterations = number(argv[0], argv[2]);
    void *page = mmap(NULL, AREA_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (page == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    fflush(NULL);
    for (long p = 1; p < parties; p++) {
        pid_t pid = fork();
        if (pid < 0) {
            perror("fork");
            return 1;
        }
        if (pid == 0) exit(party(page, (char *)page + PAGE_BYTES, p, parties, iterations));
    }
    int status = party(page, (char *)page + PAGE_BYTES, 0, parties, iterations);
    for (long p = 1; p < parties; p++) {
        int st;
        if (wait(&st) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) status = 1;
    }
    return status;
#endif
}

#endif /* SHARED_PAGE_H */
