#include "monitor.h"

// The event loop: one epoll wait, signals through a signalfd, deadlines as its timeout.

int sigfd = -1, listen_fd = -1;
bool terminated; // SIGTERM or SIGINT (logger mode)
int tag_sig, tag_listen;
bool listening;         // listen_fd is in epoll
int64_t accept_resume;  // after an accept that failed for want of fds or memory

// listen_update puts the listener in epoll when a connection may be taken: below
// MAX_CONNS, and not while accept is resting after EMFILE (a level-triggered listener
// whose accept fails would spin the loop).
void listen_update(void) {
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

void loop_once(int64_t until) {
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
int run_cmd(struct cmd *c) {
	while (!c->done || (c->outfd >= 0 && now_ms() < c->out_until))
		loop_once(c->done ? c->out_until : now_ms() + 10000);
	return c->status;
}

void loop_for(int ms) {
	int64_t end = now_ms() + ms;
	while (now_ms() < end)
		loop_once(end);
}

// drain_closing runs the loop until the replies, exit lines and last output queued for
// clients are written, at most END_FLUSH_MS.
void drain_closing(void) {
	int64_t end = now_ms() + END_FLUSH_MS;
	while (closing_left() && now_ms() < end)
		loop_once(end);
}
