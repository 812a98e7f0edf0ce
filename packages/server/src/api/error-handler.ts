import { AenvError, NEEDS_CHECKPOINT_KEY_HEADER, RuntimeMismatchError } from "@aenv/edge/errors";
import { errorBody, errorBodyOf, errorCodeOf, retryAfterOf, zodMessage } from "@aenv/edge/http-errors";
import type { FastifyError, FastifyInstance } from "fastify";
import { ZodError } from "zod";

/**
 * The one place where a node's errors become HTTP statuses, always with the E2B body {code,
 * message} (a path no route matches is answered by the edge itself: @aenv/edge/edge.ts).
 */
export function installErrorHandling(app: FastifyInstance): void {
  app.setErrorHandler((err: FastifyError | AenvError | ZodError | Error, req, reply) => {
    let { code: status, message } = errorBody(err);
    if (err instanceof AenvError) {
      // mapped by errorBody
    } else if (err instanceof ZodError) {
      status = 400;
      message = zodMessage(err);
    } else if (typeof (err as FastifyError).statusCode === "number") {
      const fe = err as FastifyError;
      status = fe.statusCode ?? 500;
      if (fe.code === "FST_ERR_CTP_BODY_TOO_LARGE") status = 413;
      message = fe.message;
      if (err instanceof SyntaxError || fe.code === "FST_ERR_CTP_INVALID_JSON_BODY") {
        status = 400;
        message = `malformed JSON body: ${fe.message}`;
      }
    }
    if (status >= 500) req.log.error({ err }, "request failed");
    if (err instanceof RuntimeMismatchError) void reply.header(NEEDS_CHECKPOINT_KEY_HEADER, err.checkpointKey);
    const retryAfter = retryAfterOf(err);
    if (retryAfter !== undefined) void reply.header("retry-after", String(retryAfter));
    void reply.status(status).send(errorBodyOf(status, message, errorCodeOf(err)));
  });
}
