/* An LD_PRELOAD library for the power-cut tests (power_cut.py): it records, for every fsync
 * and fdatasync that succeeds, the file's path and its size when the call began, one line
 * "<size> <path>\n" appended to the file named by $FSYNC_LOG. Those bytes, and only those, are
 * what a power cut right then must leave on the disk. It observes; it changes no call. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

static int log_fd = -1;

static void record(int fd, off_t size) {
    if (log_fd < 0) {
        const char *name = getenv("FSYNC_LOG");
        if (name == NULL) return;
        log_fd = open(name, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
        if (log_fd < 0) abort(); /* a test that cannot see the syncs must not pass */
    }
    char link[64], path[4096], line[4200];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, path, sizeof path - 1);
    if (n < 0) abort();
    path[n] = '\0';
    int len = snprintf(line, sizeof line, "%lld %s\n", (long long)size, path);
    if (len <= 0 || len >= (int)sizeof line) abort();
    if (write(log_fd, line, (size_t)len) != len) abort(); /* O_APPEND: one line, whole */
}

static off_t size_of(int fd) {
    struct stat st;
    return fstat(fd, &st) == 0 ? st.st_size : -1;
}

int fsync(int fd) {
    static int (*real)(int);
    if (real == NULL) real = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
    off_t size = size_of(fd);
    int rc = real(fd);
    if (rc == 0 && size >= 0) record(fd, size);
    return rc;
}

int fdatasync(int fd) {
    static int (*real)(int);
    if (real == NULL) real = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
    off_t size = size_of(fd);
    int rc = real(fd);
    if (rc == 0 && size >= 0) record(fd, size);
    return rc;
}
