#include "monitor.h"

// Time, diagnostics, allocation, epoll and the output queues every peer is written through.

// ---- time and diagnostics ----

int64_t now_ms(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

// rfc3339nano writes the current time as Go's time.RFC3339Nano does for local time.
size_t rfc3339nano(char *out, size_t n) {
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

char log_prefix[64];

// logf writes one diagnostic line as Go's log package does (LstdFlags|Lmicroseconds).
void diag(const char *fmt, ...) {
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
const char *errstr(int e) {
	static char buf[128];
	snprintf(buf, sizeof buf, "%s", strerror(e));
	if (buf[0] >= 'A' && buf[0] <= 'Z' && !(buf[1] >= 'A' && buf[1] <= 'Z'))
		buf[0] += 'a' - 'A';
	return buf;
}

const char *signame(int sig) {
	static char buf[64];
	snprintf(buf, sizeof buf, "%s", strsignal(sig));
	if (buf[0] >= 'A' && buf[0] <= 'Z')
		buf[0] += 'a' - 'A';
	return buf;
}

const char *base_name(const char *p) {
	const char *s = strrchr(p, '/');
	return s ? s + 1 : p;
}

// Out of memory ends the monitor: going on with a NULL would be worse. Where a failed allocation has a better answer (an attach
// client's output queue: drop the client) the caller uses malloc and decides.
static void oom(void) {
	diag("out of memory");
	abort();
}

void *xmalloc(size_t n) {
	void *p = malloc(n ? n : 1);
	if (!p)
		oom();
	return p;
}

void *xrealloc(void *p, size_t n) {
	p = realloc(p, n ? n : 1);
	if (!p)
		oom();
	return p;
}

void *xcalloc(size_t n, size_t size) {
	void *p = calloc(n ? n : 1, size ? size : 1);
	if (!p)
		oom();
	return p;
}

char *xstrdup(const char *s) {
	char *p = strdup(s);
	if (!p)
		oom();
	return p;
}

char *xstrndup(const char *s, size_t n) {
	char *p = strndup(s, n);
	if (!p)
		oom();
	return p;
}

// ---- small helpers ----

int epfd = -1;

bool ep_add(int fd, uint32_t events, void *ptr) {
	struct epoll_event ev = {.events = events, .data.ptr = ptr};
	return epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) == 0;
}

void ep_del(int fd) {
	epoll_ctl(epfd, EPOLL_CTL_DEL, fd, NULL);
}

void set_nonblock(int fd, bool on) {
	int fl = fcntl(fd, F_GETFL);
	if (fl >= 0)
		fcntl(fd, F_SETFL, on ? fl | O_NONBLOCK : fl & ~O_NONBLOCK);
}

// write_all_deadline writes all of buf to fd, waiting at most ms in all. Only for the
// report on fd 3 (one short line into the daemon's empty pipe, once): everything the loop
// writes to its peers goes through an output queue.
bool write_all_deadline(int fd, const void *buf, size_t n, int ms) {
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
void iov_skip(struct iovec **v, int *k, size_t w) {
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

size_t outq_pending(const struct outq *q) {
	return q->len - q->off;
}

void outq_clear(struct outq *q) {
	free(q->buf);
	q->buf = NULL;
	q->off = q->len = q->cap = 0;
}

// outq_flush writes what q holds: OUTQ_OK (all, or what fd took), OUTQ_ERR (a write error:
// the peer is gone).
int outq_flush(struct outq *q, int fd) {
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
int outq_put(struct outq *q, int fd, const struct iovec *iov, int n, size_t max) {
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

char *read_file(const char *path, size_t max, int *err) {
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
