/** Go-compatible process status strings ("exit status 1", "signal: killed"). */
import { constants } from "node:os";

const GO_SIGNAL_NAMES: Record<string, string> = {
  SIGHUP: "hangup",
  SIGINT: "interrupt",
  SIGQUIT: "quit",
  SIGILL: "illegal instruction",
  SIGTRAP: "trace/breakpoint trap",
  SIGABRT: "aborted",
  SIGBUS: "bus error",
  SIGFPE: "floating point exception",
  SIGKILL: "killed",
  SIGUSR1: "user defined signal 1",
  SIGSEGV: "segmentation fault",
  SIGUSR2: "user defined signal 2",
  SIGPIPE: "broken pipe",
  SIGALRM: "alarm clock",
  SIGTERM: "terminated",
  SIGSTKFLT: "stack fault",
  SIGCHLD: "child exited",
  SIGCONT: "continued",
  SIGSTOP: "stopped (signal)",
  SIGTSTP: "stopped",
  SIGTTIN: "stopped (tty input)",
  SIGTTOU: "stopped (tty output)",
  SIGURG: "urgent I/O condition",
  SIGXCPU: "CPU time limit exceeded",
  SIGXFSZ: "file size limit exceeded",
  SIGVTALRM: "virtual timer expired",
  SIGPROF: "profiling timer expired",
  SIGWINCH: "window changed",
  SIGIO: "I/O possible",
  SIGPWR: "power failure",
  SIGSYS: "bad system call",
};

export interface EndInfo {
  exitCode: number;
  exited: boolean;
  status: string;
  error?: string;
}

export function signalName(sig: number | string): string {
  if (typeof sig === "string") return sig;
  for (const [name, num] of Object.entries(constants.signals)) if (num === sig) return name;
  return `SIG${sig}`;
}

export function endFromExit(code: number | null, signal: number | string | null | undefined): EndInfo {
  if (signal !== null && signal !== undefined && signal !== 0) {
    const name = signalName(signal);
    const status = `signal: ${GO_SIGNAL_NAMES[name] ?? name}`;
    return { exitCode: -1, exited: false, status, error: status };
  }
  const c = code ?? -1;
  const status = `exit status ${c}`;
  return c === 0 ? { exitCode: 0, exited: true, status } : { exitCode: c, exited: true, status, error: status };
}
