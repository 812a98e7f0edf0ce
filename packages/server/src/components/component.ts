/**
 * A part of a running node, stopped by the module that started it. startServer (server.ts)
 * starts them in the order their dependencies need and stops them in the order written
 * there: what takes new work first, sandboxes next, listeners after, storage last.
 */
export interface Component {
  stop(): Promise<void> | void;
}
