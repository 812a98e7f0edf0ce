/** Errors the API maps to HTTP statuses in one place (api/error-handler.ts). */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

export const notFound = (what: string) => new ApiError(404, what);
export const badRequest = (msg: string) => new ApiError(400, msg);
export const conflict = (msg: string) => new ApiError(409, msg);
export const unavailable = (msg: string) => new ApiError(503, msg);
export const tooMany = (msg: string) => new ApiError(429, msg);
