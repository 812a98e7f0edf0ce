/*
 * aenv-init: PID 1 of every sandbox. Starts envd (its arguments) and reaps every process
 * that ends up orphaned to it — Node cannot wait() for children it did not spawn, so with
 * envd as PID 1 background jobs of finished commands stayed zombies. Signals sent to PID 1
 * are passed on to envd; when envd exits, so does init, with envd's status.
 * Built static so it runs in any root filesystem.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static pid_t child = -1;

static void forward(int sig) {
  if (child > 0) kill(child, sig);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: aenv-init PROGRAM [ARGS...]\n");
    return 2;
  }
  child = fork();
  if (child < 0) {
    perror("aenv-init: fork");
    return 1;
  }
  if (child == 0) {
    execv(argv[1], argv + 1);
    perror("aenv-init: exec");
    _exit(127);
  }
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = forward;
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGHUP, &sa, NULL);
  sigaction(SIGUSR1, &sa, NULL);
  sigaction(SIGUSR2, &sa, NULL);
  for (;;) {
    int status;
    pid_t pid = waitpid(-1, &status, 0);
    if (pid < 0) {
      if (errno == EINTR) continue;
      if (errno == ECHILD) return 0;
      perror("aenv-init: waitpid");
      return 1;
    }
    if (pid == child) {
      if (WIFEXITED(status)) return WEXITSTATUS(status);
      return 128 + WTERMSIG(status);
    }
  }
}
