#include "monitor.h"

// Connections to monitor.sock and attach sessions; the container's stdin; the console.

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

struct conn *conns;
int nconns;
int stdin_fd = -1;  // the stdin pipe's write end, or the pty master
int master_fd = -1; // the pty master of a terminal container
bool stdin_once, attach_closed;

// conn_watch tells epoll what c waits for now.
void conn_watch(struct conn *c) {
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

void conn_free(struct conn *c) {
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
bool exit_taken; // a watcher was sent the exit line whole

void conn_send_close(struct conn *c, const char *p, size_t n) {
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

void attach_broadcast(int kind, const char *p, size_t n) {
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
// client is written first (within END_FLUSH_MS, see drain_closing).
void attach_end(void) {
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

bool closing_left(void) {
	for (struct conn *c = conns; c; c = c->next)
		if (c->state == C_CLOSING)
			return true;
	return false;
}

// Stdin that the container has not read yet waits in stdin_q; meanwhile the sessions
// read no further frames (back-pressure to the client), while the loop, the log and the
// output go on. So at most one frame (1 MiB) waits.
static struct outq stdin_q;
int stdin_q_fd = -1, tag_stdin;

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

void stdin_flush(void) {
	if (outq_flush(&stdin_q, stdin_q_fd) == OUTQ_OK && outq_pending(&stdin_q) > 0)
		return;
	stdin_done(); // all written, or the container closed its stdin
}

// attach_frames handles the complete frames in c->in; false: drop the session.
bool attach_frames(struct conn *c) {
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
int receive_console(int ln, char *err, size_t errn) {
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
