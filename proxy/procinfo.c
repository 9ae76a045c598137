/*
 * procinfo.c — what /proc says of the kernel's process: its state, the
 * signals it catches, the time its threads were runnable (kernel.c's
 * heartbeat and abort, admit.c's view of whether interrupted code still
 * computes).
 */
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "proxy.h"

/* /proc/PID/FILE into buf (NUL-terminated); its length, or -1 if unreadable. */
static ssize_t
proc_read(pid_t pid, const char *file, char *buf, size_t size)
{
	char path[64];
	ssize_t n;
	int fd;

	if (pid <= 0)
		return -1;
	snprintf(path, sizeof(path), "/proc/%d/%s", (int)pid, file);
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
		return -1;
	n = read(fd, buf, size - 1);
	close(fd);
	if (n <= 0)
		return -1;
	buf[n] = '\0';
	return n;
}

/* /proc/PID/stat from its third field (the state) on, or NULL if unreadable. */
static const char *
proc_stat(pid_t pid, char *buf, size_t size)
{
	char *p;

	if (proc_read(pid, "stat", buf, size) < 0)
		return NULL;
	/* "pid (comm) S ...": comm may hold spaces and parentheses */
	if (!(p = strrchr(buf, ')')) || p[1] != ' ')
		return NULL;
	return p + 2;
}

/* The state letter of /proc/PID/stat (R, S, D, T, Z...), or 0 if unreadable. */
char
procinfo_state(pid_t pid)
{
	char buf[512];
	const char *p = proc_stat(pid, buf, sizeof(buf));

	return p ? p[0] : 0;
}

/* Whether the process has a handler for sig (SigCgt of /proc/PID/status). */
bool
procinfo_catches(pid_t pid, int sig)
{
	char buf[2048];
	const char *p;
	unsigned long long mask;

	if (proc_read(pid, "status", buf, sizeof(buf)) < 0 || !(p = strstr(buf, "\nSigCgt:")) ||
	    sscanf(p + 8, "%llx", &mask) != 1)
		return false;
	return mask >> (sig - 1) & 1;
}

/* CPU time a process has used (all its threads), in us; -1 if unknown. */
static long long
cpu_us(pid_t pid)
{
	char buf[1024];
	const char *p = proc_stat(pid, buf, sizeof(buf));
	unsigned long long utime, stime;
	long hz = sysconf(_SC_CLK_TCK);

	/* from the state (field 3) on: utime and stime are fields 14 and 15 */
	if (!p || hz <= 0 ||
	    sscanf(p, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &utime,
		   &stime) != 2)
		return -1;
	return (long long)((utime + stime) * 1000000 / (unsigned long long)hz);
}

/*
 * How long the process's threads have been runnable, on a CPU or waiting for
 * one (the first two fields of each task's schedstat, in ns), in us; its CPU
 * time where the kernel keeps no schedstat; -1 if unknown. Code that computes is runnable all the time however busy the
 * machine, where its CPU time would grow only with the share it gets.
 */
long long
procinfo_runnable_us(pid_t pid)
{
	char path[64], buf[128];
	unsigned long long run, wait, sum = 0;
	struct dirent *de;
	DIR *d;
	int n = 0;

	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	if (pid <= 0 || !(d = opendir(path)))
		return -1;
	while ((de = readdir(d)))
		if (de->d_name[0] != '.') {
			snprintf(path, sizeof(path), "task/%.20s/schedstat", de->d_name);
			if (proc_read(pid, path, buf, sizeof(buf)) > 0 &&
			    sscanf(buf, "%llu %llu", &run, &wait) == 2) {
				sum += run + wait;
				n++;
			}
		}
	closedir(d);
	return n ? (long long)(sum / 1000) : cpu_us(pid);
}
