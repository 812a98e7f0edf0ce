import { DEFAULT_TEAM_ID, type Team } from "@aenv/protocol";
import { NotFoundError } from "./errors.js";

/** E2B's one team: the caller's key is its key (one API key per cluster). */
export function teamsOf(apiKey: string): Team[] {
  return [{ teamID: DEFAULT_TEAM_ID, name: DEFAULT_TEAM_ID, apiKey, isDefault: true }];
}

/** A team route names the one team, or it is 404 (a node and a gateway alike). */
export function mustBeTeam(teamID: string): void {
  if (teamID !== DEFAULT_TEAM_ID) throw new NotFoundError(`team '${teamID}' not found`);
}
