// The in-process API: what a resource of the host app calls to file, delete and revalidate targets
// without going over HTTP (docs/in-process.md), imported as `queue-keeper/api`. Each call takes the body
// of its HTTP route and answers what the route answers, through the same checks and the same schedule
// owner; a refusal rejects with an Error carrying the route's `status` (also as `statusCode`, which
// Harper answers with) and `code`.
//
// The component is reached when a call is made, not when this module is imported: a host app's module
// may load before queue-keeper's tables exist, and importing the composition root then would start the
// component too early. By the time a resource handles a request, Harper has loaded every component, and
// the import answers the very module instance Harper loaded, with this worker's schedule owner.
import type { DeletedAnswer, FiledAnswer, RevalidatedAnswer } from './services/http/filing.js';

export type { DeletedAnswer, FiledAnswer, RevalidatedAnswer };

async function component() {
  return (await import('./resources.js')).inProcessApi;
}

/**
 * Files targets, as `POST /render_queue/targets`: `{targets: [{url, dueAt?, cadenceMs?, …}]}` →
 * `{upserted, rejected}`. Committed in a transaction of its own before it resolves, whatever
 * transaction the caller has open (docs/in-process.md).
 */
export async function fileTargets(input: unknown): Promise<FiledAnswer> {
  return (await component()).fileTargets(input);
}

/** Deletes rows and their pages, as `DELETE /render_queue/targets`: `{urls}` → `{deleted, rejected?}`. */
export async function deleteTargets(input: unknown): Promise<DeletedAnswer> {
  return (await component()).deleteTargets(input);
}

/**
 * Makes a row due now and urgent, as `POST /prerender_admin/revalidate`: `{url}` →
 * `{url, nextRenderTime, urgentAt}`; rejects with status 404, code `not_found`, without a row.
 */
export async function revalidate(input: unknown): Promise<RevalidatedAnswer> {
  return (await component()).revalidate(input);
}
