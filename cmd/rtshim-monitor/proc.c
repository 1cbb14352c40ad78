#include "monitor.h"

// Processes: the runtime commands the monitor spawns, and reaping them and the init.

struct cmd *cmds;
struct exited finished[MAX_FINISHED]; // exits reaped before their command was known
int nfinished;
pid_t init_pid; // 0 until known
bool init_done;

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

void reap_all(void) {
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
struct cmd *spawn(char **argv, int in, int out, int errfd, const char *dir, int timeout_ms, char *err,
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

void cmd_free(struct cmd *c) {
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

void cmd_read(struct cmd *c) {
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
const char *status_err(int st) {
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

const char *run_to_end(char **argv, int in, int out, int errfd, int timeout_ms, char *err, size_t errn) {
	struct cmd *c = spawn(argv, in, out, errfd, cfg.bundle, timeout_ms, err, errn);
	free(argv);
	if (!c)
		return err;
	while (!c->done)
		loop_once(now_ms() + 10000);
	const char *se = status_err(c->status);
	cmd_free(c);
	return se;
}
