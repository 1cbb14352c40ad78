#include "monitor.h"

// The state both modes share, their setup, and main.

struct json_config cfg;
bool logger_mode, started, starting, busy, exit_requested, exit_ok;
int exit_status, exit_signal;
char exit_at[64];
char *exit_line; // set once the container has exited
int start_stdio[2] = {-1, -1}, start_stdin = -1, console_fd = -1;
// starts that came while one ran (or during create): served in order, one at a time
struct conn *pending_first, *pending_last;

// ---- setup shared by both modes ----

// reserve_fds puts /dev/null on each fd from lo to hi that is not open, so that no fd
// the monitor opens takes a number that has a meaning in its protocol.
void reserve_fds(int lo, int hi) {
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

bool setup_loop(bool catch_term) {
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

void listen_close(void) {
	if (listen_fd < 0)
		return;
	if (listening)
		ep_del(listen_fd);
	close(listen_fd);
	listen_fd = -1;
	listening = false;
	unlink(SOCKET_FILE);
}

int listen_here(const char *name, char *err, size_t errn) {
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
