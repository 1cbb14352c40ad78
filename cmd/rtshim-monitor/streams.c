#include "monitor.h"

// The container's output streams: read, cut into CRI log entries, sent to attach clients.

struct stream streams[3]; // stdout, stderr, the pty master
char *tail_buf;
size_t tail_len;
bool tail_on;

// stream_lines writes the complete lines in s->buf as CRI log entries (docs/monitor-protocol.md).
void stream_lines(struct stream *s, bool eof) {
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

void stream_start(struct stream *s, int fd, const char *name, int kind) {
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
bool stream_read(struct stream *s) {
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
