/**
 * Headers of aenv's own hops (gateway → node) and the E2B ones both ends read. One
 * definition each: the gateway sets what a node checks.
 */

/** E2B's: the traffic token a private sandbox (allowPublicTraffic: false) needs on its ports. */
export const TRAFFIC_TOKEN_HEADER = "e2b-traffic-access-token";
/** Gateway → node on connect: the resume is for traffic, so only if the sandbox has autoResume. */
export const AUTO_RESUME_HEADER = "x-aenv-auto-resume";
/**
 * Gateway → node with AUTO_RESUME_HEADER: the sandbox port the traffic is for. The node
 * checks the traffic's own credentials (TRAFFIC_TOKEN_HEADER, passed on as the client sent
 * it) against the paused sandbox before resuming it, as its proxy would.
 */
export const TRAFFIC_PORT_HEADER = "x-aenv-traffic-port";
