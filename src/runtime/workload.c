/* sanpolicy's boot workload: the init of the initramfs `sanpolicy boot` packs. Built on the
 * machine as a static binary (gcc -static, the system's libc.a). Its phases exercise what the
 * seed's kernel build exercised inside a debug kernel: process creation, pipes, files, page
 * faults and locks. The scale comes from the kernel command line (`sanpolicy.scale=N`).
 *
 * Every line it prints starts with "sanpolicy: " so the console parser can tell it from the
 * kernel's: `init T` (seconds since boot when init started), `phase NAME wall= user= sys=`
 * (seconds, CLOCK_MONOTONIC and getrusage of itself and its children), `lockdep KEY: VALUE`
 * (from /proc/lockdep_stats), `total wall= user= sys=`, and `end` last. Then it reboots, which
 * ends QEMU (`-no-reboot`). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/reboot.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static long scale = 1;
static const char *self = "/init";

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

static double tv(struct timeval t) { return t.tv_sec + t.tv_usec / 1e6; }

struct sample { double wall, user, sys; };

static struct sample sample(void)
{
	struct rusage s, c;
	getrusage(RUSAGE_SELF, &s);
	getrusage(RUSAGE_CHILDREN, &c);
	struct sample x = { now(), tv(s.ru_utime) + tv(c.ru_utime), tv(s.ru_stime) + tv(c.ru_stime) };
	return x;
}

static void report(const char *name, struct sample a, struct sample b)
{
	printf("sanpolicy: phase %s wall=%.6f user=%.6f sys=%.6f\n", name, b.wall - a.wall, b.user - a.user,
	       b.sys - a.sys);
	fflush(stdout);
}

static void die(const char *what)
{
	printf("sanpolicy: error %s: %s\n", what, strerror(errno));
	fflush(stdout);
	sync();
	reboot(RB_AUTOBOOT);
	_exit(1);
}

static void forkexec(void)
{
	for (long i = 0; i < 20 * scale; i++) {
		pid_t p = fork();
		if (p < 0)
			die("fork");
		if (p == 0) {
			execl(self, self, "child", (char *)0);
			_exit(127);
		}
		int st;
		waitpid(p, &st, 0);
	}
}

static void pipes(void)
{
	int up[2], down[2];
	if (pipe(up) || pipe(down))
		die("pipe");
	pid_t p = fork();
	if (p < 0)
		die("fork");
	char buf[512];
	long rounds = 400 * scale;
	if (p == 0) {
		close(up[0]);
		close(down[1]);
		for (long i = 0; i < rounds; i++) {
			if (read(down[0], buf, sizeof buf) <= 0)
				_exit(1);
			if (write(up[1], buf, sizeof buf) != sizeof buf)
				_exit(1);
		}
		_exit(0);
	}
	close(up[1]);
	close(down[0]);
	int ep = epoll_create1(0);
	struct epoll_event ev = { .events = EPOLLIN, .data.fd = up[0] };
	if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, up[0], &ev))
		die("epoll");
	memset(buf, 'x', sizeof buf);
	for (long i = 0; i < rounds; i++) {
		if (write(down[1], buf, sizeof buf) != sizeof buf)
			die("pipe write");
		struct epoll_event got;
		if (epoll_wait(ep, &got, 1, -1) != 1)
			die("epoll_wait");
		size_t n = 0;
		while (n < sizeof buf) {
			ssize_t r = read(up[0], buf, sizeof buf - n);
			if (r <= 0)
				die("pipe read");
			n += r;
		}
	}
	close(ep);
	close(up[0]);
	close(down[1]);
	int st;
	waitpid(p, &st, 0);
}

static void files(void)
{
	char a[64], b[64], buf[4096];
	memset(buf, 'f', sizeof buf);
	/* Names of this process's own: the parallel phase runs two of these at once. */
	long me = (long)getpid();
	for (long i = 0; i < 150 * scale; i++) {
		snprintf(a, sizeof a, "/tmp/f%ld-%ld", me, i % 16);
		snprintf(b, sizeof b, "/tmp/g%ld-%ld", me, i % 16);
		int fd = open(a, O_CREAT | O_WRONLY | O_TRUNC, 0600);
		if (fd < 0)
			die("open");
		for (int k = 0; k < 4; k++)
			if (write(fd, buf, sizeof buf) != sizeof buf)
				die("write");
		close(fd);
		if (rename(a, b))
			die("rename");
		struct stat st;
		stat(b, &st);
		fd = open(b, O_RDONLY);
		while (read(fd, buf, sizeof buf) > 0)
			;
		close(fd);
		unlink(b);
	}
}

static void faults(void)
{
	long pages = 256;
	for (long i = 0; i < 12 * scale; i++) {
		char *m = mmap(0, pages * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (m == MAP_FAILED)
			die("mmap");
		for (long p = 0; p < pages; p++)
			m[p * 4096] = (char)p;
		munmap(m, pages * 4096);
	}
}

static void procfs(void)
{
	static const char *paths[] = { "/proc/self/status", "/proc/meminfo", "/proc/stat", "/proc/self/maps",
				       "/proc/lockdep_stats" };
	char buf[8192];
	for (long i = 0; i < 40 * scale; i++) {
		int fd = open(paths[i % 5], O_RDONLY);
		if (fd < 0)
			continue;
		while (read(fd, buf, sizeof buf) > 0)
			;
		close(fd);
	}
}

static void futexes(void)
{
	int *word = mmap(0, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (word == MAP_FAILED)
		die("mmap shared");
	*word = 0;
	long rounds = 300 * scale;
	pid_t p = fork();
	if (p < 0)
		die("fork");
	/* Two processes take turns: each waits for its value and hands over with a wake. */
	int me = p == 0 ? 1 : 0;
	for (long i = 0; i < rounds; i++) {
		while (__atomic_load_n(word, __ATOMIC_ACQUIRE) != me)
			syscall(SYS_futex, word, FUTEX_WAIT, !me, 0, 0, 0);
		__atomic_store_n(word, !me, __ATOMIC_RELEASE);
		syscall(SYS_futex, word, FUTEX_WAKE, 1, 0, 0, 0);
	}
	if (p == 0)
		_exit(0);
	int st;
	waitpid(p, &st, 0);
	munmap(word, 4096);
}

static void mix(void)
{
	forkexec();
	pipes();
	files();
	faults();
	procfs();
}

static void parallel(void)
{
	pid_t w[2];
	for (int i = 0; i < 2; i++) {
		w[i] = fork();
		if (w[i] < 0)
			die("fork");
		if (w[i] == 0) {
			mix();
			_exit(0);
		}
	}
	for (int i = 0; i < 2; i++) {
		int st;
		waitpid(w[i], &st, 0);
	}
}

static void lockdep_stats(void)
{
	FILE *f = fopen("/proc/lockdep_stats", "r");
	if (!f) {
		printf("sanpolicy: lockdep none\n");
		return;
	}
	char line[256];
	while (fgets(line, sizeof line, f)) {
		char *s = line;
		while (*s == ' ')
			s++;
		printf("sanpolicy: lockdep %s", s);
	}
	fclose(f);
}

static void read_scale(void)
{
	char buf[1024] = { 0 };
	int fd = open("/proc/cmdline", O_RDONLY);
	if (fd < 0)
		return;
	read(fd, buf, sizeof buf - 1);
	close(fd);
	char *s = strstr(buf, "sanpolicy.scale=");
	if (s)
		scale = strtol(s + strlen("sanpolicy.scale="), 0, 10);
	if (scale < 1)
		scale = 1;
}

int main(int argc, char **argv)
{
	if (argc > 1 && strcmp(argv[1], "child") == 0)
		return 0;
	double start = now();
	mkdir("/proc", 0555);
	mkdir("/tmp", 01777);
	if (mount("proc", "/proc", "proc", 0, 0))
		die("mount /proc");
	if (mount("tmpfs", "/tmp", "tmpfs", 0, 0))
		die("mount /tmp");
	read_scale();
	printf("sanpolicy: init %.6f scale=%ld\n", start, scale);
	fflush(stdout);
	static const struct { const char *name; void (*run)(void); } phases[] = {
		{ "fork-exec", forkexec }, { "pipes-epoll", pipes }, { "files", files },   { "page-faults", faults },
		{ "procfs", procfs },	  { "futex", futexes },	    { "parallel", parallel },
	};
	struct sample first = sample();
	for (size_t i = 0; i < sizeof phases / sizeof phases[0]; i++) {
		struct sample a = sample();
		phases[i].run();
		report(phases[i].name, a, sample());
	}
	struct sample last = sample();
	lockdep_stats();
	printf("sanpolicy: total wall=%.6f user=%.6f sys=%.6f\n", last.wall - first.wall, last.user - first.user,
	       last.sys - first.sys);
	printf("sanpolicy: end\n");
	fflush(stdout);
	sync();
	reboot(RB_AUTOBOOT);
	return 0;
}
