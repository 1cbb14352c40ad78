// rtshim-monitor: the container supervisor of rtshimd, one per container. Its protocol,
// which pkg/monitor speaks from the daemon's side, is docs/monitor-protocol.md; why it is
// C (one per container: memory) is docs/monitor-memory.md.
// One thread, one epoll loop: signalfd for SIGCHLD/SIGTERM/SIGINT, deadlines as the
// loop's timeout. Runtime commands are waited for through the loop (nested while a
// command such as create or start runs), so output keeps flowing to the CRI log.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "json.h"

extern char **environ;

#define SOCKET_FILE "monitor.sock"
#define CONSOLE_FILE "console.sock"
#define EXIT_FILE "exit.json"
#define PID_FILE "init.pid"
#define LOG_FILE "monitor.log"
#define LOGGER_CONFIG "logger.json"
#define MAX_LOG_LINE (16 * 1024)
#define MAX_FRAME (1 << 20)
#define MAX_FINISHED 64
#define CREATE_TIMEOUT_MS (4 * 60 * 1000)
#define START_TIMEOUT_MS (60 * 1000)
#define CMD_READ_MS (10 * 1000)
#define TAIL_MAX (8 << 10)

enum { FRAME_STDIN = 0, FRAME_STDOUT = 1, FRAME_STDERR = 2, FRAME_RESIZE = 3, FRAME_CLOSE_STDIN = 4 };

// ---- time and diagnostics ----

static int64_t now_ms(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

// rfc3339nano writes the current time as Go's time.RFC3339Nano does for local time.
static size_t rfc3339nano(char *out, size_t n) {
	struct timespec ts;
	struct tm tm;
	clock_gettime(CLOCK_REALTIME, &ts);
	localtime_r(&ts.tv_sec, &tm);
	size_t l = strftime(out, n, "%Y-%m-%dT%H:%M:%S", &tm);
	if (ts.tv_nsec != 0) {
		char frac[16];
		snprintf(frac, sizeof frac, "%09ld", ts.tv_nsec);
		int k = 9;
		while (k > 0 && frac[k - 1] == '0')
			k--;
		frac[k] = 0;
		l += snprintf(out + l, n - l, ".%s", frac);
	}
	long off = tm.tm_gmtoff;
	if (off == 0) {
		l += snprintf(out + l, n - l, "Z");
	} else {
		char sign = off < 0 ? '-' : '+';
		if (off < 0)
			off = -off;
		l += snprintf(out + l, n - l, "%c%02ld:%02ld", sign, off / 3600, (off / 60) % 60);
	}
	return l;
}

static char log_prefix[64];

// logf writes one diagnostic line as Go's log package does (LstdFlags|Lmicroseconds).
static void diag(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void diag(const char *fmt, ...) {
	char line[2048];
	struct timespec ts;
	struct tm tm;
	clock_gettime(CLOCK_REALTIME, &ts);
	localtime_r(&ts.tv_sec, &tm);
	int l = snprintf(line, sizeof line, "%s%04d/%02d/%02d %02d:%02d:%02d.%06ld ", log_prefix, tm.tm_year + 1900,
			 tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000);
	va_list ap;
	va_start(ap, fmt);
	int m = vsnprintf(line + l, sizeof line - l - 1, fmt, ap);
	va_end(ap);
	if (m < 0)
		m = 0;
	l += m;
	if (l > (int)sizeof line - 2)
		l = sizeof line - 2;
	line[l++] = '\n';
	ssize_t w = write(2, line, l);
	(void)w;
}

// errstr is strerror spelt as Go spells errno texts (lower case first letter): the daemon
// relays these texts in its own errors.
static const char *errstr(int e) {
	static char buf[128];
	snprintf(buf, sizeof buf, "%s", strerror(e));
	if (buf[0] >= 'A' && buf[0] <= 'Z' && !(buf[1] >= 'A' && buf[1] <= 'Z'))
		buf[0] += 'a' - 'A';
	return buf;
}

static const char *signame(int sig) {
	static char buf[64];
	snprintf(buf, sizeof buf, "%s", strsignal(sig));
	if (buf[0] >= 'A' && buf[0] <= 'Z')
		buf[0] += 'a' - 'A';
	return buf;
}

static const char *base_name(const char *p) {
	const char *s = strrchr(p, '/');
	return s ? s + 1 : p;
}

// Out of memory ends the monitor: going on with a NULL would be worse. Where a failed allocation has a better answer (an attach
// client's output queue: drop the client) the caller uses malloc and decides.
static void oom(void) {
	diag("out of memory");
	abort();
}

static void *xmalloc(size_t n) {
	void *p = malloc(n ? n : 1);
	if (!p)
		oom();
	return p;
}

static void *xrealloc(void *p, size_t n) {
	p = realloc(p, n ? n : 1);
	if (!p)
		oom();
	return p;
}

static void *xcalloc(size_t n, size_t size) {
	void *p = calloc(n ? n : 1, size ? size : 1);
	if (!p)
		oom();
	return p;
}

static char *xstrdup(const char *s) {
	char *p = strdup(s);
	if (!p)
		oom();
	return p;
}

static char *xstrndup(const char *s, size_t n) {
	char *p = strndup(s, n);
	if (!p)
		oom();
	return p;
}

// ---- small helpers ----

static int epfd = -1;

static bool ep_add(int fd, uint32_t events, void *ptr) {
	struct epoll_event ev = {.events = events, .data.ptr = ptr};
	return epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) == 0;
}

static void ep_del(int fd) {
	epoll_ctl(epfd, EPOLL_CTL_DEL, fd, NULL);
}

static void set_nonblock(int fd, bool on) {
	int fl = fcntl(fd, F_GETFL);
	if (fl >= 0)
		fcntl(fd, F_SETFL, on ? fl | O_NONBLOCK : fl & ~O_NONBLOCK);
}

// write_all_deadline writes all of buf to fd, waiting at most ms in all. Only for the
// report on fd 3 (one short line into the daemon's empty pipe, once): everything the loop
// writes to its peers goes through an output queue.
static bool write_all_deadline(int fd, const void *buf, size_t n, int ms) {
	const char *p = buf;
	int64_t end = now_ms() + ms;
	while (n > 0) {
		ssize_t w = write(fd, p, n);
		if (w > 0) {
			p += w;
			n -= w;
			continue;
		}
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0 && errno != EAGAIN)
			return false;
		int64_t left = end - now_ms();
		if (left <= 0)
			return false;
		struct pollfd pfd = {.fd = fd, .events = POLLOUT};
		if (poll(&pfd, 1, (int)left) < 0 && errno != EINTR)
			return false;
	}
	return true;
}

// iov_skip drops the first w bytes from the *k parts at *v (what a writev took).
static void iov_skip(struct iovec **v, int *k, size_t w) {
	while (*k > 0 && w >= (*v)->iov_len) {
		w -= (*v)->iov_len;
		(*v)++;
		(*k)--;
	}
	if (*k > 0) {
		(*v)->iov_base = (char *)(*v)->iov_base + w;
		(*v)->iov_len -= w;
	}
}

// ---- output queues ----
// One way for everything the loop writes to a peer that may not take it at once (an
// attach client, the container's stdin, a command's reply): write what the non-blocking
// fd takes now, keep the rest in order, and write it when epoll says EPOLLOUT. The loop
// never waits for a writer. The buffer exists only while something is waiting.

struct outq {
	char *buf;
	size_t off, len, cap; // buf[off:len] waits
};

static size_t outq_pending(const struct outq *q) {
	return q->len - q->off;
}

static void outq_clear(struct outq *q) {
	free(q->buf);
	q->buf = NULL;
	q->off = q->len = q->cap = 0;
}

enum { OUTQ_OK = 0, OUTQ_ERR = -1, OUTQ_FULL = -2 };

// outq_flush writes what q holds: OUTQ_OK (all, or what fd took), OUTQ_ERR (a write error:
// the peer is gone).
static int outq_flush(struct outq *q, int fd) {
	while (outq_pending(q) > 0) {
		ssize_t w = write(fd, q->buf + q->off, outq_pending(q));
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0 && errno == EAGAIN)
			return OUTQ_OK;
		if (w <= 0)
			return OUTQ_ERR;
		q->off += w;
	}
	outq_clear(q);
	return OUTQ_OK;
}

// outq_put writes the n parts (at most OUTQ_PARTS) in iov behind what q holds, keeping
// what fd does not take now. OUTQ_FULL: more than max bytes would wait (nothing is added;
// the caller drops the peer); OUTQ_ERR: a write error, or no memory for the rest.
#define OUTQ_PARTS 4
static int outq_put(struct outq *q, int fd, const struct iovec *iov, int n, size_t max) {
	struct iovec parts[OUTQ_PARTS], *v = parts;
	int k = n < OUTQ_PARTS ? n : OUTQ_PARTS;
	size_t rest = 0;
	for (int i = 0; i < k; i++) {
		parts[i] = iov[i];
		rest += iov[i].iov_len;
	}
	if (outq_pending(q) == 0) {
		while (rest > 0) {
			ssize_t w = writev(fd, v, k);
			if (w < 0 && errno == EINTR)
				continue;
			if (w < 0 && errno == EAGAIN)
				break;
			if (w <= 0)
				return OUTQ_ERR;
			rest -= w;
			iov_skip(&v, &k, w);
		}
		if (rest == 0)
			return OUTQ_OK;
	}
	if (outq_pending(q) + rest > max)
		return OUTQ_FULL;
	if (q->off > 0 && q->len + rest > q->cap) {
		memmove(q->buf, q->buf + q->off, outq_pending(q));
		q->len -= q->off;
		q->off = 0;
	}
	if (q->len + rest > q->cap) {
		size_t cap = q->cap ? q->cap : 4096;
		while (cap < q->len + rest)
			cap *= 2;
		char *b = realloc(q->buf, cap);
		if (!b)
			return OUTQ_ERR;
		q->buf = b;
		q->cap = cap;
	}
	for (int i = 0; i < k; i++) {
		memcpy(q->buf + q->len, v[i].iov_base, v[i].iov_len);
		q->len += v[i].iov_len;
	}
	return OUTQ_OK;
}

static char *read_file(const char *path, size_t max, int *err) {
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		*err = errno;
		return NULL;
	}
	size_t cap = 4096, len = 0;
	char *b = xmalloc(cap);
	for (;;) {
		if (len + 1 >= cap) {
			if (cap >= max)
				break;
			cap *= 2;
			b = xrealloc(b, cap);
		}
		ssize_t r = read(fd, b + len, cap - 1 - len);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			*err = errno;
			close(fd);
			free(b);
			return NULL;
		}
		if (r == 0)
			break;
		len += r;
	}
	close(fd);
	b[len] = 0;
	return b;
}

// ---- the CRI log ----

static char *log_dir, *log_rel; // log_rel set: a log is configured and was accepted
static int log_fd = -1;

// path_clean is Go's filepath.Clean: the shortest lexically equal path (malloc'd).
static char *path_clean(const char *p) {
	size_t n = strlen(p);
	bool abs = p[0] == '/';
	char *out = xmalloc(n + 2);
	size_t o = 0;
	size_t *starts = xmalloc(sizeof(size_t) * (n / 2 + 2)); // where each kept element begins
	size_t depth = 0, dotdots = 0;
	if (abs)
		out[o++] = '/';
	size_t i = 0;
	while (i < n) {
		while (i < n && p[i] == '/')
			i++;
		size_t j = i;
		while (j < n && p[j] != '/')
			j++;
		size_t l = j - i;
		if (l == 0 || (l == 1 && p[i] == '.')) {
			// skip
		} else if (l == 2 && p[i] == '.' && p[i + 1] == '.') {
			if (depth > dotdots) {
				o = starts[--depth];
				if (o > (size_t)abs && out[o - 1] == '/')
					o--;
				else if (o == (size_t)abs && depth == 0)
					o = abs;
			} else if (!abs) {
				if (o > 0)
					out[o++] = '/';
				starts[depth++] = o - (o > 0 ? 0 : 0);
				memcpy(out + o, "..", 2);
				o += 2;
				dotdots++;
			}
		} else {
			if (o > (size_t)abs)
				out[o++] = '/';
			starts[depth++] = o;
			memcpy(out + o, p + i, l);
			o += l;
		}
		i = j;
	}
	if (o == 0)
		out[o++] = '.';
	out[o] = 0;
	free(starts);
	return out;
}

// log_rel_of checks that path lies below dir (filepath.Rel + IsLocal) and returns the
// relative path, or NULL with the error text in err.
static char *log_rel_of(const char *dir, const char *path, char *err, size_t errn) {
	char *d = path_clean(dir), *p = path_clean(path), *rel = NULL;
	size_t dl = strlen(d);
	bool rootdir = strcmp(d, "/") == 0;
	if ((d[0] == '/') == (p[0] == '/') && strcmp(d, ".") != 0 && strncmp(p, d, dl) == 0 &&
	    (rootdir || p[dl] == '/') && p[rootdir ? 1 : dl + 1] != 0)
		rel = xstrdup(p + (rootdir ? 1 : dl + 1));
	else if (strcmp(d, ".") == 0 && p[0] != '/' && strcmp(p, ".") != 0 && strncmp(p, "../", 3) != 0 && strcmp(p, "..") != 0)
		rel = xstrdup(p);
	free(d);
	free(p);
	// What Rel gives must be local (filepath.IsLocal): a directory of ".." components
	// alone is a prefix of "../../x", whose rest "../x" lies outside it.
	if (rel && (strcmp(rel, "..") == 0 || strncmp(rel, "../", 3) == 0)) {
		free(rel);
		rel = NULL;
	}
	if (!rel)
		snprintf(err, errn, "log file \"%s\" is not below the log directory \"%s\"", path, dir);
	return rel;
}

struct open_how_ {
	uint64_t flags, mode, resolve;
};

static bool openat2_missing;

// open_beneath opens rel below dir without following a symlink; -1 with errno and err.
static int open_beneath(const char *dir, const char *rel, char *err, size_t errn) {
	int flags = O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK;
	int dfd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0) {
		snprintf(err, errn, "open log %s/%s: open log directory: open %s: %s", dir, rel, dir, errstr(errno));
		return -1;
	}
	int fd = -1, e = 0;
	if (!openat2_missing) {
		struct open_how_ how = {.flags = (uint64_t)flags, .mode = 0640, .resolve = 0x08 | 0x04 | 0x02};
		for (int i = 0; i < 8; i++) {
			fd = (int)syscall(SYS_openat2, dfd, rel, &how, sizeof how);
			e = fd < 0 ? errno : 0;
			if (fd >= 0 || (e != EAGAIN && e != EINTR))
				break;
		}
		if (fd < 0 && e == ENOSYS)
			openat2_missing = true;
	}
	if (openat2_missing) {
		int cur = dup(dfd);
		char *copy = xstrdup(rel), *save = NULL;
		char *part = strtok_r(copy, "/", &save);
		e = 0;
		while (part && cur >= 0) {
			char *next = strtok_r(NULL, "/", &save);
			int nfd;
			if (next)
				nfd = openat(cur, part, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			else
				nfd = fd = openat(cur, part, flags, 0640);
			if (nfd < 0)
				e = errno;
			close(cur);
			cur = next ? nfd : -1;
			part = next;
		}
		if (cur >= 0)
			close(cur);
		free(copy);
	}
	close(dfd);
	if (fd < 0) {
		if (e == ELOOP || e == EXDEV)
			snprintf(err, errn, "open log %s/%s: a path component is a symlink, which is not followed: %s", dir,
				 rel, errstr(e));
		else
			snprintf(err, errn, "open log %s/%s: %s", dir, rel, errstr(e));
		return -1;
	}
	struct stat st;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		snprintf(err, errn, "open log %s/%s: not a regular file (mode %#o)", dir, rel, st.st_mode & S_IFMT);
		close(fd);
		return -1;
	}
	if (st.st_nlink > 1) {
		// A link planted at the log path would have root append to the file it names.
		snprintf(err, errn, "open log %s/%s: the file has %lu hard links: a log file has one, so it is not written",
			 dir, rel, (unsigned long)st.st_nlink);
		close(fd);
		return -1;
	}
	set_nonblock(fd, false);
	return fd;
}

// log_open opens the CRI log at path below dir (empty: path's directory).
static bool log_open(const char *dir, const char *path, char *err, size_t errn) {
	char *d;
	if (!dir || !*dir) {
		d = xstrdup(path);
		char *s = strrchr(d, '/');
		if (s == d)
			s[1] = 0;
		else if (s)
			*s = 0;
		else
			strcpy(d, ".");
	} else {
		d = xstrdup(dir);
	}
	char *rel = log_rel_of(d, path, err, errn);
	if (!rel) {
		free(d);
		return false;
	}
	int fd = open_beneath(d, rel, err, errn);
	if (fd < 0) {
		free(d);
		free(rel);
		return false;
	}
	log_dir = d;
	log_rel = rel;
	log_fd = fd;
	return true;
}

static bool log_reopen(char *err, size_t errn) {
	int fd = open_beneath(log_dir, log_rel, err, errn);
	if (fd < 0)
		return false;
	close(log_fd);
	log_fd = fd;
	return true;
}

static unsigned long log_dropped; // entries lost since the last that was written

// log_entry appends one entry. A short write is continued; an error (a full disk, most
// often) drops the entry whole: the file is cut back to where the entry began, so that
// no torn line runs into the next entry (kubelet skips a line it cannot parse, and would
// lose both). The log says when dropping starts and how many entries it cost.
static void log_entry(const char *stream, char tag, const char *text, size_t n) {
	if (log_fd < 0)
		return;
	char hdr[64];
	size_t l = rfc3339nano(hdr, sizeof hdr);
	l += snprintf(hdr + l, sizeof hdr - l, " %s %c ", stream, tag);
	struct iovec iov[3] = {{hdr, l}, {(void *)text, n}, {"\n", 1}};
	struct iovec *v = iov;
	int k = 3;
	size_t written = 0;
	while (k > 0) {
		ssize_t w = writev(log_fd, v, k);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			int e = w < 0 ? errno : EIO;
			// The only writer, appending: the entry began where the file ends, less what
			// went in.
			struct stat st;
			if (written > 0 && (fstat(log_fd, &st) < 0 || ftruncate(log_fd, st.st_size - (off_t)written) < 0))
				diag("container log: cut back a torn entry: %s", errstr(errno));
			if (log_dropped++ == 0)
				diag("container log: write: %s; entries are dropped until a write succeeds", errstr(e));
			return;
		}
		written += (size_t)w;
		iov_skip(&v, &k, w);
	}
	if (log_dropped > 0) {
		diag("container log: writing again; %lu entries were dropped", log_dropped);
		log_dropped = 0;
	}
}

// ---- the container's output streams ----

struct stream {
	int fd;
	const char *name;
	int kind;
	char *buf; // MAX_LOG_LINE bytes, as bufio.Reader's in CRILog.Copy
	size_t len;
	bool waited; // logger mode: its end ends the logger
	bool open;
};

static struct stream streams[3]; // stdout, stderr, the pty master
static char *tail_buf;
static size_t tail_len;
static bool tail_on;

static void attach_broadcast(int kind, const char *p, size_t n);

// stream_lines writes the complete lines in s->buf as CRILog.Copy does (pkg/monitor).
static void stream_lines(struct stream *s, bool eof) {
	size_t off = 0;
	for (;;) {
		char *b = s->buf + off;
		size_t n = s->len - off;
		char *nl = memchr(b, '\n', n);
		if (nl) {
			size_t ll = nl - b;
			size_t tl = ll;
			if (tl > 0 && b[tl - 1] == '\r')
				tl--;
			log_entry(s->name, 'F', b, tl);
			off += ll + 1;
			continue;
		}
		if (n >= MAX_LOG_LINE) {
			size_t pl = n;
			if (b[pl - 1] == '\r')
				pl--; // "\r\n" may straddle the buffer: keep the \r for the next line
			log_entry(s->name, 'P', b, pl);
			off += pl;
			continue;
		}
		if (eof && n > 0) {
			// Output that ends without a newline is partial, as containerd writes it:
			// kubelet adds a newline after an F entry only.
			log_entry(s->name, 'P', b, n);
			off += n;
		}
		break;
	}
	if (off > 0) {
		memmove(s->buf, s->buf + off, s->len - off);
		s->len -= off;
	}
}

static void tail_add(const char *p, size_t n) {
	if (!tail_on)
		return;
	if (n >= TAIL_MAX) {
		memcpy(tail_buf, p + n - TAIL_MAX, TAIL_MAX);
		tail_len = TAIL_MAX;
		return;
	}
	if (tail_len + n > TAIL_MAX) {
		size_t drop = tail_len + n - TAIL_MAX;
		memmove(tail_buf, tail_buf + drop, tail_len - drop);
		tail_len -= drop;
	}
	memcpy(tail_buf + tail_len, p, n);
	tail_len += n;
}

static void stream_close(struct stream *s) {
	if (!s->open)
		return;
	stream_lines(s, true);
	ep_del(s->fd);
	close(s->fd);
	s->fd = -1;
	s->open = false;
	free(s->buf);
	s->buf = NULL;
}

static bool stream_read(struct stream *s);

static void stream_start(struct stream *s, int fd, const char *name, int kind) {
	s->fd = fd;
	s->name = name;
	s->kind = kind;
	s->buf = xmalloc(MAX_LOG_LINE);
	s->len = 0;
	s->open = true;
	set_nonblock(fd, true);
	if (!ep_add(fd, EPOLLIN, s)) {
		// Not pollable (a regular file, /dev/null) or not a file: read it to its end now.
		while (s->open && stream_read(s))
			;
		stream_close(s);
	}
}

// stream_read reads what the stream has now; false once it would block.
static bool stream_read(struct stream *s) {
	for (int rounds = 0; rounds < 16; rounds++) {
		ssize_t r = read(s->fd, s->buf + s->len, MAX_LOG_LINE - s->len);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0 && errno == EAGAIN)
			return false;
		if (r <= 0) {
			stream_close(s);
			return false;
		}
		tail_add(s->buf + s->len, r);
		attach_broadcast(s->kind, s->buf + s->len, r);
		s->len += r;
		stream_lines(s, false);
	}
	return true;
}

// ---- connections and attach sessions ----

// ATTACH_QUEUE_MAX bounds the output that waits for one attach client beyond what its
// socket buffer holds (~200 KiB). The log never waits for a client (one thread: waiting
// would throttle the container's output), and a client is dropped (closed) once this
// much waits for it. 1 MiB: the protocol's largest
// frame; several seconds of a terminal's output, so a client that pauses briefly (a
// daemon's GC, a slow network hop) keeps its session; and a bound on what one lagging
// client costs a monitor whose whole footprint is ~170 KiB.
#define ATTACH_QUEUE_MAX (1 << 20)
// REPLY_MS bounds how long a reply or an exit line waits for its peer to take it.
#define REPLY_MS 10000
// MAX_CONNS bounds the connections served at once (the daemon holds a watch and opens a
// few more): past it, new ones wait in the listen backlog instead of taking fds.
#define MAX_CONNS 128
// MAX_ATTACH bounds the attach sessions among them (monitor.MaxAttach): past it an attach is
// refused with an error frame, so that sessions never take the connections the daemon's
// control requests (reopen, watch, start, exit) need.
#define MAX_ATTACH 32
#define FRAME_ERROR 5

enum conn_state { C_CMD, C_WATCH, C_ATTACH, C_BUSY, C_CLOSING };

struct conn {
	int fd;
	enum conn_state state;
	int64_t deadline; // C_CMD: the command line's; C_CLOSING: the reply's
	char *in;
	size_t len, cap;
	struct outq out;
	uint32_t events;   // what epoll watches for it now (0: not registered)
	bool paused;       // a stdin frame waits for the container to read what came before
	bool in_eof;       // the client sent all it will (frames may still wait in `in`)
	bool out_dead;     // a write to the client failed: its output is discarded
	bool exit_reply;   // C_CLOSING: what it sends is the exit line
	struct conn *next; // all connections
	struct conn *qnext; // C_BUSY: the next start waiting behind this one
};

static struct conn *conns;
static int nconns;
static int stdin_fd = -1;  // the stdin pipe's write end, or the pty master
static int master_fd = -1; // the pty master of a terminal container
static bool stdin_once, attach_closed;

static void listen_update(void);

// conn_watch tells epoll what c waits for now.
static void conn_watch(struct conn *c) {
	uint32_t ev = 0;
	bool out = outq_pending(&c->out) > 0 && !c->out_dead;
	switch (c->state) {
	case C_CLOSING:
		ev = out ? EPOLLOUT : 0;
		break;
	case C_BUSY:
		break;
	default:
		if (!c->paused && !c->in_eof)
			ev |= EPOLLIN;
		if (out)
			ev |= EPOLLOUT;
	}
	if (ev == c->events)
		return;
	struct epoll_event e = {.events = ev, .data.ptr = c};
	if (ev == 0)
		epoll_ctl(epfd, EPOLL_CTL_DEL, c->fd, NULL);
	else
		epoll_ctl(epfd, c->events == 0 ? EPOLL_CTL_ADD : EPOLL_CTL_MOD, c->fd, &e);
	c->events = ev;
}

static void conn_free(struct conn *c) {
	struct conn **pp = &conns;
	while (*pp && *pp != c)
		pp = &(*pp)->next;
	if (*pp) {
		*pp = c->next;
		nconns--;
	}
	if (c->events)
		ep_del(c->fd);
	close(c->fd);
	free(c->in);
	outq_clear(&c->out);
	free(c);
	listen_update();
}

// conn_send_close writes the line to c and closes c once it is taken (or REPLY_MS
// passed); the client reads no more from it.
static bool exit_taken; // a watcher was sent the exit line whole

static void conn_send_close(struct conn *c, const char *p, size_t n) {
	struct iovec v = {(void *)p, n};
	int r = outq_put(&c->out, c->fd, &v, 1, SIZE_MAX);
	if (r != OUTQ_OK || outq_pending(&c->out) == 0) {
		if (r == OUTQ_OK && c->exit_reply)
			exit_taken = true;
		conn_free(c);
		return;
	}
	c->state = C_CLOSING;
	c->deadline = now_ms() + REPLY_MS;
	conn_watch(c);
}

static void attach_broadcast(int kind, const char *p, size_t n) {
	unsigned char hdr[5] = {(unsigned char)kind, n >> 24, n >> 16, n >> 8, n};
	struct iovec v[2] = {{hdr, 5}, {(void *)p, n}};
	for (struct conn *c = conns, *next; c; c = next) {
		next = c->next;
		if (c->state != C_ATTACH || c->out_dead)
			continue;
		// Never a wait: what the client does not take now waits in its queue, in order.
		switch (outq_put(&c->out, c->fd, v, 2, ATTACH_QUEUE_MAX)) {
		case OUTQ_FULL:
			diag("attach client dropped: more than %d KiB of output waited for it", ATTACH_QUEUE_MAX >> 10);
			conn_free(c);
			continue;
		case OUTQ_ERR:
			c->out_dead = true;
			outq_clear(&c->out);
			break;
		}
		conn_watch(c);
	}
}

// attach_end ends every session: the container has exited. Output still queued for a
// client is written first (within END_FLUSH_MS, see drain_closing): a client that keeps
// up gets all the output.
#define END_FLUSH_MS 1000

static void attach_end(void) {
	attach_closed = true;
	for (struct conn *c = conns, *next; c; c = next) {
		next = c->next;
		if (c->state != C_ATTACH)
			continue;
		if (outq_pending(&c->out) == 0 || c->out_dead) {
			conn_free(c);
			continue;
		}
		c->state = C_CLOSING;
		c->deadline = now_ms() + END_FLUSH_MS;
		conn_watch(c);
	}
}

static bool closing_left(void) {
	for (struct conn *c = conns; c; c = c->next)
		if (c->state == C_CLOSING)
			return true;
	return false;
}

// Stdin that the container has not read yet waits in stdin_q; meanwhile the sessions
// read no further frames (back-pressure to the client), while the loop, the log and the
// output go on. So at most one frame (1 MiB) waits.
static struct outq stdin_q;
static int stdin_q_fd = -1, tag_stdin;

static bool attach_frames(struct conn *c);

static void stdin_done(void) {
	if (stdin_q_fd >= 0)
		ep_del(stdin_q_fd);
	stdin_q_fd = -1;
	outq_clear(&stdin_q);
	for (struct conn *c = conns, *nx; c; c = nx) {
		nx = c->next;
		if (!c->paused)
			continue;
		c->paused = false;
		if (!attach_frames(c) || (c->in_eof && !c->paused)) {
			conn_free(c);
			continue;
		}
		conn_watch(c);
	}
}

static void stdin_write(const char *p, size_t n) {
	set_nonblock(stdin_fd, true);
	struct iovec v = {(void *)p, n};
	if (outq_put(&stdin_q, stdin_fd, &v, 1, SIZE_MAX) != OUTQ_OK) {
		outq_clear(&stdin_q); // the container closed its stdin: dropped
		return;
	}
	if (outq_pending(&stdin_q) > 0 && stdin_q_fd < 0) {
		stdin_q_fd = stdin_fd;
		ep_add(stdin_q_fd, EPOLLOUT, &tag_stdin);
	}
}

static void stdin_flush(void) {
	if (outq_flush(&stdin_q, stdin_q_fd) == OUTQ_OK && outq_pending(&stdin_q) > 0)
		return;
	stdin_done(); // all written, or the container closed its stdin
}

// attach_frames handles the complete frames in c->in; false: drop the session.
static bool attach_frames(struct conn *c) {
	size_t off = 0;
	bool ok = true;
	while (c->len - off >= 5 && !c->paused) {
		if (outq_pending(&stdin_q) > 0) {
			c->paused = true;
			break;
		}
		unsigned char *h = (unsigned char *)c->in + off;
		uint32_t n = (uint32_t)h[1] << 24 | (uint32_t)h[2] << 16 | (uint32_t)h[3] << 8 | h[4];
		if (n > MAX_FRAME) {
			ok = false;
			break;
		}
		if (c->len - off < 5 + (size_t)n)
			break;
		char *p = c->in + off + 5;
		switch (h[0]) {
		case FRAME_STDIN:
			if (stdin_fd >= 0)
				stdin_write(p, n);
			break;
		case FRAME_RESIZE:
			if (master_fd >= 0 && n == 4) {
				struct winsize ws = {0};
				ws.ws_col = (unsigned char)p[0] << 8 | (unsigned char)p[1];
				ws.ws_row = (unsigned char)p[2] << 8 | (unsigned char)p[3];
				ioctl(master_fd, TIOCSWINSZ, &ws);
			}
			break;
		case FRAME_CLOSE_STDIN:
			if (stdin_once) {
				if (stdin_fd >= 0 && stdin_fd != master_fd)
					close(stdin_fd);
				stdin_fd = -1;
			}
			break;
		}
		off += 5 + n;
	}
	if (off > 0) {
		memmove(c->in, c->in + off, c->len - off);
		c->len -= off;
	}
	return ok;
}

// CONSOLE_MS bounds the wait for the runtime's terminal: its connection and its message
// together.
#define CONSOLE_MS 10000

// receive_console accepts the runtime's connection on the console socket and returns the
// pty master it sends, or -1 with err; within CONSOLE_MS whatever the peer does.
static int receive_console(int ln, char *err, size_t errn) {
	struct pollfd pfd = {.fd = ln, .events = POLLIN};
	int64_t end = now_ms() + CONSOLE_MS;
	int c = -1;
	for (;;) {
		c = accept4(ln, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
		if (c >= 0)
			break;
		if (errno != EAGAIN && errno != EINTR) {
			snprintf(err, errn, "wait for the terminal: %s", errstr(errno));
			return -1;
		}
		int64_t left = end - now_ms();
		if (left <= 0) {
			snprintf(err, errn, "wait for the terminal: accept unix %s: i/o timeout", CONSOLE_FILE);
			return -1;
		}
		poll(&pfd, 1, (int)left);
	}
	char data[4096];
	union {
		struct cmsghdr h;
		char b[CMSG_SPACE(sizeof(int))];
	} cm;
	struct iovec iov = {data, sizeof data};
	struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cm.b, .msg_controllen = sizeof cm.b};
	ssize_t r;
	for (;;) {
		r = recvmsg(c, &msg, MSG_CMSG_CLOEXEC);
		if (r >= 0 || (errno != EAGAIN && errno != EINTR))
			break;
		// A peer that connects and sends nothing must not hold the monitor.
		int64_t left = end - now_ms();
		if (left <= 0) {
			close(c);
			snprintf(err, errn, "wait for the terminal: read unix %s: i/o timeout", CONSOLE_FILE);
			return -1;
		}
		struct pollfd cp = {.fd = c, .events = POLLIN};
		poll(&cp, 1, (int)left);
	}
	close(c);
	if (r < 0) {
		snprintf(err, errn, "wait for the terminal: %s", errstr(errno));
		return -1;
	}
	struct cmsghdr *h = CMSG_FIRSTHDR(&msg);
	if (!h || h->cmsg_level != SOL_SOCKET || h->cmsg_type != SCM_RIGHTS || h->cmsg_len < CMSG_LEN(sizeof(int))) {
		snprintf(err, errn, "no terminal received");
		return -1;
	}
	int fd;
	memcpy(&fd, CMSG_DATA(h), sizeof fd);
	// Whoever reached the console socket could send any file: the container's stdio and
	// its log would then go to and come from it.
	if (!isatty(fd)) {
		snprintf(err, errn, "the file received on %s is not a terminal: %s", CONSOLE_FILE, errstr(errno));
		close(fd);
		return -1;
	}
	diag("terminal received");
	return fd;
}

// ---- processes: spawn and reap ----

struct cmd {
	pid_t pid;
	int status;
	bool done;
	int64_t kill_at; // 0: no timeout
	int outfd;       // read end of its output, or -1
	char *out;
	size_t outlen;
	bool out_eof;
	int64_t out_until; // after the end: how long to wait for the output's EOF
	struct cmd *next;
	void (*on_done)(struct cmd *); // async commands (runtime wait)
};

static struct cmd *cmds;
static struct {
	pid_t pid;
	int status;
} finished[MAX_FINISHED];
static int nfinished;
static pid_t init_pid; // 0 until known
static bool init_done;

static void init_exited(int status);

static void reaped(pid_t pid, int status) {
	for (struct cmd *c = cmds; c; c = c->next) {
		if (c->pid == pid && !c->done) {
			c->done = true;
			c->status = status;
			c->out_until = now_ms() + 1000;
			return;
		}
	}
	if (init_pid > 0 && pid == init_pid && !init_done) {
		init_exited(status);
		return;
	}
	if (nfinished >= MAX_FINISHED) {
		memmove(finished, finished + 1, sizeof finished[0] * (MAX_FINISHED - 1));
		nfinished--;
	}
	finished[nfinished].pid = pid;
	finished[nfinished].status = status;
	nfinished++;
}

static void reap_all(void) {
	for (;;) {
		int st;
		pid_t p = waitpid(-1, &st, WNOHANG);
		if (p < 0 && errno == EINTR)
			continue;
		if (p <= 0)
			return;
		reaped(p, st);
	}
}

// spawn starts argv with the given stdio in dir; the cmd is registered before the
// reaper can see its end. NULL with err on failure.
static struct cmd *spawn(char **argv, int in, int out, int errfd, const char *dir, int timeout_ms, char *err,
			 size_t errn) {
	posix_spawn_file_actions_t fa;
	posix_spawnattr_t at;
	posix_spawn_file_actions_init(&fa);
	posix_spawnattr_init(&at);
	// dup2 onto itself clears FD_CLOEXEC in glibc's posix_spawn.
	posix_spawn_file_actions_adddup2(&fa, in, 0);
	posix_spawn_file_actions_adddup2(&fa, out, 1);
	posix_spawn_file_actions_adddup2(&fa, errfd, 2);
	posix_spawn_file_actions_addchdir_np(&fa, dir);
	sigset_t none, all;
	sigemptyset(&none);
	sigemptyset(&all);
	sigaddset(&all, SIGCHLD);
	sigaddset(&all, SIGTERM);
	sigaddset(&all, SIGINT);
	sigaddset(&all, SIGPIPE);
	posix_spawnattr_setsigmask(&at, &none);
	posix_spawnattr_setsigdefault(&at, &all);
	posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
	pid_t pid;
	int e = posix_spawn(&pid, argv[0], &fa, &at, argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	posix_spawnattr_destroy(&at);
	if (e != 0) {
		snprintf(err, errn, "fork/exec %s: %s", argv[0], errstr(e));
		return NULL;
	}
	struct cmd *c = xcalloc(1, sizeof *c);
	c->pid = pid;
	c->outfd = -1;
	c->kill_at = timeout_ms > 0 ? now_ms() + timeout_ms : 0;
	c->next = cmds;
	cmds = c;
	// An earlier process with the same pid: its stale status is not this one's.
	for (int i = 0; i < nfinished; i++)
		if (finished[i].pid == pid) {
			memmove(finished + i, finished + i + 1, sizeof finished[0] * (nfinished - i - 1));
			nfinished--;
			break;
		}
	return c;
}

static void cmd_free(struct cmd *c) {
	struct cmd **pp = &cmds;
	while (*pp && *pp != c)
		pp = &(*pp)->next;
	if (*pp)
		*pp = c->next;
	if (c->outfd >= 0) {
		ep_del(c->outfd);
		close(c->outfd);
	}
	free(c->out);
	free(c);
}

static void cmd_read(struct cmd *c) {
	for (;;) {
		char buf[4096];
		ssize_t r = read(c->outfd, buf, sizeof buf);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0 && errno == EAGAIN)
			return;
		if (r <= 0) {
			c->out_eof = true;
			ep_del(c->outfd);
			close(c->outfd);
			c->outfd = -1;
			return;
		}
		if (c->outlen + r > (1 << 20))
			r = (1 << 20) - c->outlen;
		c->out = xrealloc(c->out, c->outlen + r + 1);
		memcpy(c->out + c->outlen, buf, r);
		c->outlen += r;
		c->out[c->outlen] = 0;
	}
}

// status_err describes a wait status as Go's exec errors do; NULL for success.
static const char *status_err(int st) {
	static char buf[96];
	if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
		return NULL;
	if (WIFEXITED(st))
		snprintf(buf, sizeof buf, "exit status %d", WEXITSTATUS(st));
	else if (WIFSIGNALED(st))
		snprintf(buf, sizeof buf, "killed by %s", signame(WTERMSIG(st)));
	else
		snprintf(buf, sizeof buf, "exit status 255");
	return buf;
}

// ---- the event loop ----

static int sigfd = -1, listen_fd = -1;
static bool terminated; // SIGTERM or SIGINT (logger mode)
static int tag_sig, tag_listen;
static bool listening;         // listen_fd is in epoll
static int64_t accept_resume;  // after an accept that failed for want of fds or memory

static void conn_event(struct conn *c, uint32_t events);
static void conn_accept(void);

// listen_update puts the listener in epoll when a connection may be taken: below
// MAX_CONNS, and not while accept is resting after EMFILE (a level-triggered listener
// whose accept fails would spin the loop).
static void listen_update(void) {
	if (listen_fd < 0)
		return;
	bool want = nconns < MAX_CONNS && accept_resume == 0;
	if (want == listening)
		return;
	if (want)
		ep_add(listen_fd, EPOLLIN, &tag_listen);
	else
		ep_del(listen_fd);
	listening = want;
}

static void loop_once(int64_t until) {
	int64_t t = now_ms();
	int64_t next = until;
	for (struct conn *c = conns; c; c = c->next)
		if ((c->state == C_CMD || c->state == C_CLOSING) && c->deadline < next)
			next = c->deadline;
	if (accept_resume && accept_resume < next)
		next = accept_resume;
	for (struct cmd *c = cmds; c; c = c->next) {
		if (!c->done && c->kill_at && c->kill_at < next)
			next = c->kill_at;
		if (c->done && c->on_done && c->outfd >= 0 && c->out_until < next)
			next = c->out_until;
	}
	int timeout = next <= t ? 0 : (next - t > 10000 ? 10000 : (int)(next - t));
	struct epoll_event evs[16];
	int n = epoll_wait(epfd, evs, 16, timeout);
	for (int i = 0; i < n; i++) {
		void *p = evs[i].data.ptr;
		if (p == &tag_sig) {
			struct signalfd_siginfo si;
			while (read(sigfd, &si, sizeof si) == sizeof si) {
				if (si.ssi_signo == SIGTERM || si.ssi_signo == SIGINT) {
					if (!terminated)
						diag("%s", signame(si.ssi_signo));
					terminated = true;
				}
			}
			reap_all();
		} else if (p == &tag_stdin) {
			stdin_flush();
		} else if (p == &tag_listen) {
			conn_accept();
		} else if (p >= (void *)streams && p < (void *)(streams + 3)) {
			struct stream *s = p;
			if (s->open)
				stream_read(s);
		} else {
			// A conn or a cmd's output: cmds are told by their outfd.
			bool isCmd = false;
			for (struct cmd *c = cmds; c; c = c->next)
				if ((void *)c == p) {
					isCmd = true;
					if (c->outfd >= 0)
						cmd_read(c);
				}
			if (!isCmd) {
				for (struct conn *c = conns; c; c = c->next)
					if ((void *)c == p) {
						conn_event(c, evs[i].events);
						break;
					}
			}
		}
	}
	reap_all(); // the safety net: a SIGCHLD coalesced with another
	t = now_ms();
	for (struct conn *c = conns, *nx; c; c = nx) {
		nx = c->next;
		if ((c->state == C_CMD || c->state == C_CLOSING) && c->deadline <= t)
			conn_free(c);
	}
	if (accept_resume && accept_resume <= t) {
		accept_resume = 0;
		listen_update();
	}
	for (struct cmd *c = cmds, *nx; c; c = nx) {
		nx = c->next;
		if (!c->done && c->kill_at && c->kill_at <= t) {
			kill(c->pid, SIGKILL);
			c->kill_at = 0;
		}
		if (c->on_done && c->done && (c->outfd < 0 || c->out_until <= t)) {
			c->on_done(c);
			cmd_free(c);
		}
	}
}

// run_cmd waits through the loop until c has ended and (if it has output) its output
// ended or a second passed; returns its wait status.
static int run_cmd(struct cmd *c) {
	while (!c->done || (c->outfd >= 0 && now_ms() < c->out_until))
		loop_once(c->done ? c->out_until : now_ms() + 10000);
	return c->status;
}

static void loop_for(int ms) {
	int64_t end = now_ms() + ms;
	while (now_ms() < end)
		loop_once(end);
}

// drain_closing runs the loop until the replies, exit lines and last output queued for
// clients are written, at most END_FLUSH_MS.
static void drain_closing(void) {
	int64_t end = now_ms() + END_FLUSH_MS;
	while (closing_left() && now_ms() < end)
		loop_once(end);
}

// ---- monitor mode state ----

static struct json_config cfg;
static bool logger_mode, started, starting, busy, exit_requested, exit_ok;
static int exit_status, exit_signal;
static char exit_at[64];
static char *exit_line; // set once the container has exited
static int start_stdio[2] = {-1, -1}, start_stdin = -1, console_fd = -1;
// starts that came while one ran (or during create): served in order, as the Go
// monitor's mutex serves them
static struct conn *pending_first, *pending_last;

static void reply(struct conn *c, const char *err) {
	char buf[4096];
	int l;
	if (err) {
		l = snprintf(buf, sizeof buf - 1, "error ");
		for (const char *p = err; *p && l < (int)sizeof buf - 2; p++) {
			if (*p == '\n') {
				int k = snprintf(buf + l, sizeof buf - 2 - l, " | ");
				l += k;
			} else
				buf[l++] = *p;
		}
		if (l > (int)sizeof buf - 2)
			l = sizeof buf - 2;
		buf[l++] = '\n';
	} else {
		l = snprintf(buf, sizeof buf, "ok\n");
	}
	conn_send_close(c, buf, l);
}

static void notify(const char *line) {
	free(exit_line);
	exit_line = xstrdup(line);
	for (struct conn *c = conns, *nx; c; c = nx) {
		nx = c->next;
		if (c->state == C_WATCH) {
			c->exit_reply = line[0] == '{' && line[1] != '}';
			conn_send_close(c, line, strlen(line));
		}
	}
}

static char **runtime_argv(const char *a1, const char *a2, const char *a3) {
	size_t n = cfg.runtime_nargs + 8;
	char **v = xcalloc(n, sizeof *v);
	size_t k = 0;
	v[k++] = cfg.runtime;
	for (size_t i = 0; i < cfg.runtime_nargs; i++)
		v[k++] = cfg.runtime_args[i];
	if (a1)
		v[k++] = (char *)a1;
	if (a2)
		v[k++] = (char *)a2;
	if (a3)
		v[k++] = (char *)a3;
	return v;
}

// runtime_output runs `<runtime> <args…> a1 a2` in "/" with its output to a pipe.
static struct cmd *runtime_output(const char *a1, const char *a2, int timeout_ms, char *err, size_t errn) {
	int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
	int p[2];
	if (devnull < 0 || pipe2(p, O_CLOEXEC) < 0) {
		snprintf(err, errn, "%s", errstr(errno));
		if (devnull >= 0)
			close(devnull);
		return NULL;
	}
	char **argv = runtime_argv(a1, a2, NULL);
	struct cmd *c = spawn(argv, devnull, p[1], p[1], "/", timeout_ms, err, errn);
	free(argv);
	close(devnull);
	close(p[1]);
	if (!c) {
		close(p[0]);
		return NULL;
	}
	c->outfd = p[0];
	set_nonblock(p[0], true);
	ep_add(p[0], EPOLLIN, c);
	return c;
}

static void trim(char *s) {
	if (!s)
		return;
	size_t n = strlen(s);
	while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\n' || s[n - 1] == '\t' || s[n - 1] == '\r'))
		s[--n] = 0;
	size_t k = 0;
	while (s[k] == ' ' || s[k] == '\n' || s[k] == '\t' || s[k] == '\r')
		k++;
	memmove(s, s + k, n - k + 1);
}

static void record_exit(pid_t pid, int status, int sig) {
	if (exit_requested || init_done)
		return;
	init_done = true;
	exit_ok = true;
	exit_status = status;
	exit_signal = sig;
	rfc3339nano(exit_at, sizeof exit_at);
	(void)pid;
}

static void init_exited(int st) {
	if (WIFEXITED(st))
		record_exit(init_pid, WEXITSTATUS(st), 0);
	else if (WIFSIGNALED(st))
		record_exit(init_pid, 128 + WTERMSIG(st), WTERMSIG(st));
	else
		record_exit(init_pid, 255, 0);
}

static void wait_done(struct cmd *c) {
	int status = 255;
	const char *e = status_err(c->status);
	trim(c->out);
	long v = 0;
	if (!e && c->out && json_object_int(c->out, "exitStatus", &v) >= 0)
		status = (int)v;
	else
		diag("%s wait: %s: %s", base_name(cfg.runtime), e ? e : "bad output", c->out ? c->out : "");
	record_exit(0, status, 0);
}

static void start_console_stream(int fd) {
	master_fd = stdin_fd = fd;
	// A terminal has one stream: the container's output, logged as stdout.
	stream_start(&streams[2], fcntl(fd, F_DUPFD_CLOEXEC, 3), "stdout", FRAME_STDOUT);
}

// do_start runs `<runtime> start`; NULL on success, or the error text.
static const char *do_start(void) {
	static char err[8192];
	if (started)
		return NULL;
	if (start_stdio[0] >= 0) {
		// runsc hands a subcontainer the start command's own stdio.
		int in = start_stdin >= 0 ? start_stdin : open("/dev/null", O_RDONLY | O_CLOEXEC);
		char **argv = runtime_argv("start", cfg.id, NULL);
		char e2[1024];
		struct cmd *c = spawn(argv, in, start_stdio[0], start_stdio[1], cfg.bundle, START_TIMEOUT_MS, e2, sizeof e2);
		free(argv);
		close(in);
		start_stdin = -1;
		close(start_stdio[0]);
		close(start_stdio[1]);
		start_stdio[0] = start_stdio[1] = -1;
		if (!c) {
			snprintf(err, sizeof err, "%s start: %s: ", base_name(cfg.runtime), e2);
			return err;
		}
		int st = run_cmd(c);
		cmd_free(c);
		const char *se = status_err(st);
		if (se) {
			snprintf(err, sizeof err, "%s start: %s: ", base_name(cfg.runtime), se);
			return err;
		}
	} else {
		char e2[1024];
		struct cmd *c = runtime_output("start", cfg.id, START_TIMEOUT_MS, e2, sizeof e2);
		if (!c) {
			snprintf(err, sizeof err, "%s start: %s: ", base_name(cfg.runtime), e2);
			return err;
		}
		int st = run_cmd(c);
		trim(c->out);
		const char *se = status_err(st);
		if (se) {
			snprintf(err, sizeof err, "%s start: %s: %s", base_name(cfg.runtime), se, c->out ? c->out : "");
			cmd_free(c);
			return err;
		}
		cmd_free(c);
	}
	if (console_fd >= 0) {
		char e2[1024];
		int m = receive_console(console_fd, e2, sizeof e2);
		close(console_fd);
		console_fd = -1;
		unlink(CONSOLE_FILE);
		if (m < 0) {
			snprintf(err, sizeof err, "%s start: %s", base_name(cfg.runtime), e2);
			return err;
		}
		start_console_stream(m);
	}
	started = true;
	if (cfg.wait_with_runtime) {
		char e2[1024];
		struct cmd *c = runtime_output("wait", cfg.id, 0, e2, sizeof e2);
		if (!c) {
			diag("%s wait: %s", base_name(cfg.runtime), e2);
			record_exit(0, 255, 0);
		} else {
			c->on_done = wait_done;
		}
	}
	return NULL;
}

static void serve_pending_starts(void);

static void handle_start(struct conn *c) {
	c->state = C_BUSY;
	conn_watch(c);
	if (busy) {
		c->qnext = NULL;
		if (pending_last)
			pending_last->qnext = c;
		else
			pending_first = c;
		pending_last = c;
		return;
	}
	busy = starting = true;
	const char *e = do_start();
	busy = starting = false;
	reply(c, e);
	serve_pending_starts();
}

static void serve_pending_starts(void) {
	while (pending_first && !busy) {
		struct conn *c = pending_first;
		pending_first = c->qnext;
		if (!pending_first)
			pending_last = NULL;
		handle_start(c);
	}
}

static void handle_command(struct conn *c, const char *cmd) {
	if (logger_mode && strcmp(cmd, "attach") != 0 && strcmp(cmd, "reopen") != 0) {
		char e[512];
		snprintf(e, sizeof e, "command \"%.400s\" is not served in logger mode", cmd);
		reply(c, e);
		return;
	}
	if (strcmp(cmd, "watch") == 0) {
		if (exit_line) {
			c->exit_reply = exit_line[0] == '{' && exit_line[1] != '}';
			conn_send_close(c, exit_line, strlen(exit_line));
			return;
		}
		c->state = C_WATCH;
		c->len = 0;
		conn_watch(c);
	} else if (strcmp(cmd, "start") == 0) {
		handle_start(c);
	} else if (strcmp(cmd, "attach") == 0) {
		if (attach_closed) {
			conn_free(c);
			return;
		}
		int sessions = 0;
		for (struct conn *o = conns; o; o = o->next)
			sessions += o->state == C_ATTACH;
		if (sessions >= MAX_ATTACH) {
			char f[64];
			int n = snprintf(f + 5, sizeof f - 5, "too many attach sessions (%d)", MAX_ATTACH);
			f[0] = FRAME_ERROR, f[1] = 0, f[2] = 0, f[3] = 0, f[4] = (char)n;
			conn_send_close(c, f, 5 + (size_t)n);
			return;
		}
		c->state = C_ATTACH;
		if (!attach_frames(c))
			conn_free(c);
		else
			conn_watch(c);
	} else if (strcmp(cmd, "reopen") == 0) {
		if (!log_rel) {
			reply(c, "container has no log");
			return;
		}
		char e[1024];
		reply(c, log_reopen(e, sizeof e) ? NULL : e);
	} else if (strcmp(cmd, "exit") == 0) {
		if (started || starting) {
			reply(c, "container was started; it ends when its process does");
			return;
		}
		exit_requested = true;
		reply(c, NULL);
	} else {
		char e[512];
		snprintf(e, sizeof e, "unknown command \"%.400s\"", cmd);
		reply(c, e);
	}
}

static void conn_accept(void) {
	while (nconns < MAX_CONNS) {
		int fd = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
		if (fd < 0) {
			if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
				diag("accept: %s; accepting again in 100ms", errstr(errno));
				accept_resume = now_ms() + 100;
			}
			break; // EAGAIN, or a connection that went away before it was taken
		}
		struct conn *c = xcalloc(1, sizeof *c);
		c->fd = fd;
		c->state = C_CMD;
		c->deadline = now_ms() + CMD_READ_MS;
		c->next = conns;
		conns = c;
		nconns++;
		conn_watch(c);
	}
	listen_update();
}

static void conn_read(struct conn *c);

static void conn_event(struct conn *c, uint32_t events) {
	if (outq_pending(&c->out) > 0 && (events & (EPOLLOUT | EPOLLERR | EPOLLHUP))) {
		if (outq_flush(&c->out, c->fd) != OUTQ_OK) {
			if (c->state != C_ATTACH) {
				conn_free(c);
				return;
			}
			c->out_dead = true; // frames it sent are still served
			outq_clear(&c->out);
		}
		if (c->state == C_CLOSING && outq_pending(&c->out) == 0) {
			if (c->exit_reply)
				exit_taken = true;
			conn_free(c);
			return;
		}
		conn_watch(c);
	}
	if ((events & (EPOLLIN | EPOLLERR | EPOLLHUP)) && (c->events & EPOLLIN))
		conn_read(c);
}

static void conn_read(struct conn *c) {
	for (;;) {
		if (c->cap - c->len < 4096) {
			size_t want = c->cap ? c->cap * 2 : 4096;
			if (c->state == C_ATTACH) {
				size_t need = c->len >= 5 ? 5 + ((size_t)(unsigned char)c->in[1] << 24 |
								 (size_t)(unsigned char)c->in[2] << 16 |
								 (size_t)(unsigned char)c->in[3] << 8 | (unsigned char)c->in[4])
							  : 4096;
				if (need > want)
					want = need + 4096;
			}
			if (c->state != C_ATTACH && c->cap >= 64 * 1024) {
				conn_free(c); // a command line that never ends
				return;
			}
			if (want > MAX_FRAME + 4096 + 5)
				want = MAX_FRAME + 4096 + 5;
			if (want > c->cap) {
				c->in = xrealloc(c->in, want);
				c->cap = want;
			}
		}
		if (c->len == c->cap) {
			// Full, which only a paused session's buffer can be: read on once it runs.
			conn_watch(c);
			return;
		}
		ssize_t r = read(c->fd, c->in + c->len, c->cap - c->len);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0 && errno == EAGAIN)
			return;
		if (r <= 0) {
			// The client is done sending: a session whose frames wait for stdin ends
			// once they are handled.
			if (c->state == C_ATTACH && c->paused && r == 0) {
				c->in_eof = true;
				conn_watch(c);
				return;
			}
			conn_free(c);
			return;
		}
		if (c->state == C_WATCH)
			continue; // nothing more is read from a watcher
		c->len += r;
		if (c->state == C_CMD) {
			char *nl = memchr(c->in, '\n', c->len);
			if (!nl)
				continue;
			size_t ll = nl - c->in;
			char *cmd = xstrndup(c->in, ll);
			memmove(c->in, nl + 1, c->len - ll - 1);
			c->len -= ll + 1;
			trim(cmd);
			handle_command(c, cmd);
			free(cmd);
			return; // c may be gone
		}
		if (c->state == C_ATTACH) {
			if (!attach_frames(c)) {
				conn_free(c);
				return;
			}
			if (c->paused) {
				conn_watch(c); // no more reading until the container takes its stdin
				return;
			}
		}
	}
}

// ---- setup shared by both modes ----

// reserve_fds puts /dev/null on each fd from lo to hi that is not open, so that no fd
// the monitor opens takes a number that has a meaning in its protocol.
static void reserve_fds(int lo, int hi) {
	for (int fd = lo; fd <= hi; fd++) {
		if (fcntl(fd, F_GETFD) >= 0 || errno != EBADF)
			continue;
		int n = open("/dev/null", O_RDWR | O_CLOEXEC);
		if (n >= 0 && n != fd) {
			dup3(n, fd, O_CLOEXEC);
			close(n);
		}
	}
}

static bool setup_loop(bool catch_term) {
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGCHLD);
	if (catch_term) {
		sigaddset(&set, SIGTERM);
		sigaddset(&set, SIGINT);
	}
	sigprocmask(SIG_BLOCK, &set, NULL);
	signal(SIGPIPE, SIG_IGN);
	epfd = epoll_create1(EPOLL_CLOEXEC);
	sigfd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
	if (epfd < 0 || sigfd < 0)
		return false;
	ep_add(sigfd, EPOLLIN, &tag_sig);
	return true;
}

static void listen_close(void) {
	if (listen_fd < 0)
		return;
	if (listening)
		ep_del(listen_fd);
	close(listen_fd);
	listen_fd = -1;
	listening = false;
	unlink(SOCKET_FILE);
}

static int listen_here(const char *name, char *err, size_t errn) {
	unlink(name);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	snprintf(a.sun_path, sizeof a.sun_path, "%s", name);
	// The mode is set between bind and listen (a connect is refused until listen), so the
	// socket never accepts with what the umask left: only root connects.
	if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) < 0 || chmod(name, 0600) < 0 || listen(fd, 128) < 0) {
		snprintf(err, errn, "listen unix %s: bind: %s", name, errstr(errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	return fd;
}

// ---- monitor mode ----

static int sync_fd = 3;

static void report(const char *json) {
	write_all_deadline(sync_fd, json, strlen(json), 10000);
	close(sync_fd);
	sync_fd = -1;
}

static void report_error(const char *msg) {
	size_t n = strlen(msg) * 6 + 32;
	char *b = xmalloc(n);
	size_t l = snprintf(b, n, "{\"error\":");
	l += json_quote(b + l, n - l, msg);
	snprintf(b + l, n - l, "}\n");
	report(b);
	free(b);
}

static int fail(const char *msg) {
	report_error(msg);
	diag("monitor: %s", msg);
	return 1;
}

// create runs `<runtime> create`; the init's pid, or 0 with err.
static pid_t create(char *err, size_t errn) {
	char e2[1024];
	if (cfg.log_path && *cfg.log_path) {
		if (!log_open(cfg.log_dir, cfg.log_path, e2, sizeof e2)) {
			snprintf(err, errn, "open container log %s: %s", cfg.log_path, e2);
			return 0;
		}
	}
	int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (devnull < 0) {
		snprintf(err, errn, "open /dev/null: %s", errstr(errno));
		return 0;
	}
	int in = devnull, pin[2] = {-1, -1};
	stdin_once = cfg.stdin_once;
	if (cfg.stdin && !cfg.terminal) {
		if (pipe2(pin, O_CLOEXEC) < 0) {
			snprintf(err, errn, "pipe: %s", errstr(errno));
			return 0;
		}
		in = pin[0];
		stdin_fd = pin[1];
	}
	int console = -1;
	if (cfg.terminal) {
		console = listen_here(CONSOLE_FILE, e2, sizeof e2);
		if (console < 0) {
			snprintf(err, errn, "console socket: %s", e2);
			return 0;
		}
	}
	tail_buf = xmalloc(TAIL_MAX);
	tail_on = true;
	int po[2], pe[2];
	if (pipe2(po, O_CLOEXEC) < 0 || pipe2(pe, O_CLOEXEC) < 0) {
		snprintf(err, errn, "pipe: %s", errstr(errno));
		return 0;
	}
	stream_start(&streams[0], po[0], "stdout", FRAME_STDOUT);
	stream_start(&streams[1], pe[0], "stderr", FRAME_STDERR);

	char pidfile[PATH_MAX];
	snprintf(pidfile, sizeof pidfile, "%s/%s", cfg.dir, PID_FILE);
	size_t n = cfg.runtime_nargs + 12, k = 0;
	char **argv = xcalloc(n, sizeof *argv);
	argv[k++] = cfg.runtime;
	for (size_t i = 0; i < cfg.runtime_nargs; i++)
		argv[k++] = cfg.runtime_args[i];
	argv[k++] = "create";
	argv[k++] = "--bundle";
	argv[k++] = cfg.bundle;
	argv[k++] = "--pid-file";
	argv[k++] = pidfile;
	if (console >= 0) {
		argv[k++] = "--console-socket";
		argv[k++] = CONSOLE_FILE;
	}
	argv[k++] = cfg.id;
	struct cmd *c = spawn(argv, in, po[1], pe[1], cfg.bundle, CREATE_TIMEOUT_MS, e2, sizeof e2);
	free(argv);
	const char *se = e2;
	if (c) {
		// Only the process's end: nothing waits for its output pipes' EOF.
		while (!c->done)
			loop_once(now_ms() + 10000);
		se = status_err(c->status);
		cmd_free(c);
	}
	if (cfg.wait_with_runtime && !se) {
		// A sandboxed subcontainer gets its stdio from `start`.
		start_stdio[0] = po[1];
		start_stdio[1] = pe[1];
		if (pin[0] >= 0)
			start_stdin = pin[0];
	} else {
		close(po[1]);
		close(pe[1]);
		if (pin[0] >= 0)
			close(pin[0]);
	}
	close(devnull);
	if (se) {
		loop_for(20); // let the copiers take the runtime's last words
		char *t = xstrndup(tail_buf, tail_len);
		trim(t);
		snprintf(err, errn, "%s create: %s: %s", base_name(cfg.runtime), se, t);
		free(t);
		return 0;
	}
	tail_on = false;
	free(tail_buf);
	tail_buf = NULL;
	tail_len = 0;
	if (console >= 0) {
		if (cfg.wait_with_runtime) {
			console_fd = console; // runsc hands a subcontainer's terminal over at start
		} else {
			int m = receive_console(console, e2, sizeof e2);
			close(console);
			unlink(CONSOLE_FILE);
			if (m < 0) {
				snprintf(err, errn, "%s create: %s", base_name(cfg.runtime), e2);
				return 0;
			}
			start_console_stream(m);
		}
	}
	int perr = 0;
	char *b = read_file(pidfile, 4096, &perr);
	if (!b) {
		snprintf(err, errn, "%s create: read pid file: open %s: %s", base_name(cfg.runtime), pidfile, errstr(perr));
		return 0;
	}
	char *end;
	char *t = xstrdup(b);
	trim(t);
	long pid = strtol(t, &end, 10);
	if (!*t || *end || pid <= 0 || pid > INT_MAX) {
		snprintf(err, errn, "%s create: bad pid file \"%s\"", base_name(cfg.runtime), b);
		free(b);
		free(t);
		return 0;
	}
	free(b);
	free(t);
	return (pid_t)pid;
}

static bool write_exit_file(const char *data) {
	char tmp[PATH_MAX], path[PATH_MAX];
	snprintf(path, sizeof path, "%s/%s", cfg.dir, EXIT_FILE);
	snprintf(tmp, sizeof tmp, "%s/.%s.tmp%ld", cfg.dir, EXIT_FILE, (long)getpid());
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0) {
		unlink(tmp);
		fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_EXCL | O_CLOEXEC, 0600);
	}
	if (fd < 0) {
		diag("write exit file: open %s: %s", tmp, errstr(errno));
		return false;
	}
	size_t n = strlen(data);
	bool ok = write(fd, data, n) == (ssize_t)n && fchmod(fd, 0600) == 0 && fsync(fd) == 0;
	int e = errno;
	if (close(fd) < 0 && ok) {
		ok = false;
		e = errno;
	}
	if (!ok || rename(tmp, path) < 0) {
		if (ok)
			e = errno;
		unlink(tmp);
		diag("write exit file: %s", errstr(e));
		return false;
	}
	int dfd = open(cfg.dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd >= 0) {
		fsync(dfd);
		close(dfd);
	}
	return true;
}

static int run_monitor(const char *cfgpath) {
	reserve_fds(sync_fd, sync_fd); // the report goes nowhere else, whatever we were given
	fcntl(sync_fd, F_SETFD, FD_CLOEXEC);
	int e = 0;
	char *b = read_file(cfgpath, 1 << 20, &e);
	char msg[8192];
	if (!b) {
		snprintf(msg, sizeof msg, "monitor: read config: open %s: %s", cfgpath, errstr(e));
		report_error(msg);
		diag("monitor: read config: open %s: %s", cfgpath, errstr(e));
		return 1;
	}
	const char *perr = json_parse_config(b, &cfg, false);
	free(b);
	if (perr) {
		snprintf(msg, sizeof msg, "monitor: read config: %s", perr);
		report_error(msg);
		diag("%s", msg);
		return 1;
	}
	if (!cfg.id)
		cfg.id = "";
	if (!cfg.dir)
		cfg.dir = "";
	if (!cfg.runtime)
		cfg.runtime = "";
	if (!cfg.bundle)
		cfg.bundle = "";
	snprintf(log_prefix, sizeof log_prefix, "%.12s ", cfg.id);
	if (!setup_loop(false)) {
		snprintf(msg, sizeof msg, "monitor: event loop: %s", errstr(errno));
		return fail(msg + 9);
	}
	// Orphans of the runtime become our children: we wait for the init, reap the rest.
	if (prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) < 0) {
		snprintf(msg, sizeof msg, "monitor: set child subreaper: %s", errstr(errno));
		report_error(msg);
		diag("%s", msg);
		return 1;
	}
	if (chdir(cfg.dir) < 0) {
		snprintf(msg, sizeof msg, "monitor: chdir %s: %s", cfg.dir, errstr(errno));
		report_error(msg);
		diag("%s", msg);
		return 1;
	}
	char e2[1024];
	listen_fd = listen_here(SOCKET_FILE, e2, sizeof e2);
	if (listen_fd < 0) {
		snprintf(msg, sizeof msg, "monitor: listen %s: %s", SOCKET_FILE, e2);
		report_error(msg);
		diag("%s", msg);
		return 1;
	}
	listen_update();

	busy = true; // a start that comes during create waits for it
	pid_t pid = create(msg, sizeof msg);
	if (pid == 0) {
		report_error(msg);
		diag("monitor: %s", msg);
		return 1;
	}
	char ok[64];
	snprintf(ok, sizeof ok, "{\"pid\":%d}\n", (int)pid);
	report(ok);
	diag("container %s created, pid %d", cfg.id, (int)pid);
	if (!cfg.wait_with_runtime) {
		init_pid = pid;
		for (int i = 0; i < nfinished; i++)
			if (finished[i].pid == pid) {
				int st = finished[i].status;
				memmove(finished + i, finished + i + 1, sizeof finished[0] * (nfinished - i - 1));
				nfinished--;
				init_exited(st);
				break;
			}
	}
	busy = false;
	serve_pending_starts();
	while (!init_done && !exit_requested)
		loop_once(now_ms() + 10000);
	// What the container wrote before its end is in the pipes now (the reaper may have
	// seen the end first): it goes to the log and to the attach clients before their
	// sessions end. Bounded, should something else hold the pipes and write on.
	for (int i = 0; i < 3; i++)
		for (int k = 0; k < 4 && streams[i].open && stream_read(&streams[i]); k++)
			;
	if (init_done) {
		char data[256];
		int l = snprintf(data, sizeof data, "{\"pid\":%d,\"status\":%d,", (int)(cfg.wait_with_runtime ? 0 : pid),
				 exit_status);
		if (exit_signal)
			l += snprintf(data + l, sizeof data - l, "\"signal\":%d,", exit_signal);
		snprintf(data + l, sizeof data - l, "\"exited_at\":\"%s\"}", exit_at);
		bool saved = write_exit_file(data);
		diag("container exited with status %d", exit_status);
		char line[260];
		snprintf(line, sizeof line, "%s\n", data);
		notify(line);
		attach_end();
		// Without exit.json a daemon that is not watching now would never learn the exit
		// (it would record 137): serve it to watchers until one takes it, and try the file
		// again each second meanwhile.
		if (!saved && !exit_taken)
			diag("exit.json not written: serving the exit to the next watcher");
		for (int64_t next = now_ms() + 1000; !saved && !exit_taken;) {
			loop_once(next);
			if (now_ms() >= next) {
				saved = write_exit_file(data);
				next = now_ms() + 1000;
			}
		}
	} else {
		diag("supervision ended without a start");
		notify("{}\n");
	}
	// Connections already made are served in the moment below (a client that connected
	// before the exit expects its answer); closing the listener would reset them.
	if (listening)
		conn_accept();
	listen_close();
	// A moment for the last lines; never wait for EOF (runsc holds the pipes). Then what
	// clients have not taken yet, for a bounded time.
	loop_for(100);
	drain_closing();
	for (int i = 0; i < 3; i++)
		if (streams[i].open)
			stream_lines(&streams[i], true);
	return 0;
}

// ---- logger mode ----

static int run_logger(const char *dir) {
	// The ways in use fds 3 to 5 (a shim's stdout, stderr and ready fd; or the daemon's
	// ready fd 3 alone). Hold the free ones first, so that nothing opened here (the epoll
	// fd, the signalfd) lands where the fallback of an unreadable config looks.
	reserve_fds(3, 5);
	// Before anything can say we are ready: a SIGTERM right after must drain, not kill us.
	if (!setup_loop(true))
		return 1;
	logger_mode = true;
	char path[PATH_MAX];
	snprintf(path, sizeof path, "%s/%s", dir, LOGGER_CONFIG);
	int e = 0;
	char *b = read_file(path, 1 << 20, &e);
	const char *cfgErr = NULL;
	char cerr[PATH_MAX + 128];
	if (!b) {
		snprintf(cerr, sizeof cerr, "open %s: %s", path, errstr(e));
		cfgErr = cerr;
	} else {
		cfgErr = json_parse_config(b, &cfg, true);
		free(b);
	}
	int ready = cfg.stdout_fifo && *cfg.stdout_fifo ? 3 : 5;
	snprintf(path, sizeof path, "%s/%s", dir, LOG_FILE);
	int lf = open(path, O_CREAT | O_WRONLY | O_APPEND | O_CLOEXEC, 0600);
	if (lf >= 0) {
		dup2(lf, 2);
		close(lf);
	}
	const char *id = getenv("CONTAINER_ID");
	snprintf(log_prefix, sizeof log_prefix, "%.12s logger ", id ? id : "");
	// Whatever fails here, keep reading the output: a logger that went away would leave
	// the container's writes failing.
	if (cfgErr)
		diag("read config: %s; the output is discarded", cfgErr);
	char err[2048];
	if (cfg.log_path && *cfg.log_path && !log_open(cfg.log_dir, cfg.log_path, err, sizeof err))
		diag("open container log %s: %s; the output is discarded", cfg.log_path, err);
	if (cfg.stdin_fifo && *cfg.stdin_fifo) {
		// O_RDWR: opening a FIFO for writing alone blocks until a reader is there.
		int fd = open(cfg.stdin_fifo, O_RDWR | O_CLOEXEC);
		if (fd < 0)
			diag("open stdin %s: %s", cfg.stdin_fifo, errstr(errno));
		else {
			stdin_fd = fd;
			stdin_once = cfg.stdin_once;
		}
	}
	if (chdir(dir) < 0) {
		diag("attach unavailable: chdir %s: %s", dir, errstr(errno));
	} else {
		listen_fd = listen_here(SOCKET_FILE, err, sizeof err);
		if (listen_fd < 0)
			diag("attach unavailable: listen %s: %s", SOCKET_FILE, err);
		else
			listen_update();
	}
	bool fifo_mode = cfg.stdout_fifo && *cfg.stdout_fifo;
	for (int i = 0; i < 2; i++) {
		const char *name = i == 0 ? "stdout" : "stderr";
		int kind = i == 0 ? FRAME_STDOUT : FRAME_STDERR;
		char *fifo = i == 0 ? cfg.stdout_fifo : cfg.stderr_fifo;
		if (fifo_mode && !(fifo && *fifo))
			continue; // FIFO mode without this stream (a terminal has no stderr)
		streams[i].waited = !cfg.terminal || i == 0;
		if (fifo_mode) {
			// A FIFO goes into epoll at once, opened O_RDONLY|O_NONBLOCK: the open does not
			// wait for the writer (the shim), and Linux reports no EPOLLHUP on such a reader
			// until a writer has come (fifo_open suppresses it), so nothing wakes the loop
			// before the shim's first write, and its close is the stream's end, as the Go
			// logger's blocking open and read see it. Keeping a write end open ourselves
			// (or O_RDWR) would hide that end. A FIFO that cannot be opened is not waited
			// for (it never opens).
			int fd = open(fifo, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
			if (fd < 0)
				diag("open %s: %s", fifo, errstr(errno));
			else
				stream_start(&streams[i], fd, name, kind);
		} else {
			fcntl(3 + i, F_SETFD, FD_CLOEXEC);
			stream_start(&streams[i], 3 + i, name, kind);
			// What cannot be read (the write end that is the daemon's ready fd, when an
			// unreadable config sent us here) ends now, as Go's first read ends it.
			if (streams[i].open)
				stream_read(&streams[i]);
		}
	}
	close(ready);
	diag("logging to \"%s\"", cfg.log_path ? cfg.log_path : "");
	int64_t term_at = 0;
	for (;;) {
		int open_waited = 0;
		for (int i = 0; i < 2; i++)
			if (streams[i].waited && streams[i].open)
				open_waited++;
		if (open_waited == 0)
			break;
		if (terminated && term_at == 0)
			term_at = now_ms() + 2000;
		if (term_at && now_ms() >= term_at) {
			diag("terminated: the output did not end within 2s");
			break;
		}
		loop_once(term_at ? term_at : now_ms() + 10000);
	}
	diag("output ended");
	attach_end();
	listen_close();
	drain_closing();
	if (stdin_fd >= 0)
		close(stdin_fd);
	return 0;
}

int main(int argc, char **argv) {
	if (argc == 3 && strcmp(argv[1], "logger") == 0) {
		if (run_logger(argv[2]) != 0) {
			return 1;
		}
		return 0;
	}
	if (argc != 2) {
		fprintf(stderr, "usage: rtshim-monitor <dir>/monitor.json | logger <dir> (started by rtshimd or a shim)\n");
		return 2;
	}
	return run_monitor(argv[1]);
}
