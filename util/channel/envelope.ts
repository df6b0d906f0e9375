// The persistent channel's message envelope (docs/fleets.md, "The persistent channel"): what a fleet may send
// on `/render_queue/channel`, checked whole before anything is applied, so a bad message changes nothing.
// Pure: the message's shape is the document's (docs/openapi.yaml, ChannelMessage), then the named checks
// it cannot say; the route module (services/http/routes/channel.ts) parses the JSON, answers a Problem,
// and applies what this admits.
import { Problem, type Checked } from '../problem.js';
import { requestShape, type RequestShape } from '../requests/shape.js';

/** A channel message as docs/openapi.yaml describes it; a bad `credits` or `queues` has its own code. */
export const CHANNEL_MESSAGE: RequestShape = requestShape('openChannel$message', 'message', {
  credits: 'invalid_credits',
  queues: 'invalid_queues',
});

export interface EnvelopeLimits {
  /** Results per message, as per `job_results` / `next` call. */
  maxResults: number;
  /** Credits a socket may be owed at once (outstanding, after this message). */
  maxCredits: number;
}

export interface ChannelEnvelope {
  results: unknown[];
  /** Credits added by this message (0 when absent). */
  credits: number;
  /** Drop every credit outstanding: nothing more is pushed until new credits come (a fleet stopping). */
  withdraw: boolean;
  /** The `queues` narrowing: undefined keeps the socket's scope, null resets it to all. */
  queues: string[] | null | undefined;
  ref: string | number | undefined;
}

/**
 * Checks a parsed message: its documented shape (each result is checked on its own later, as in
 * `job_results`), then what the shape cannot say: at most maxResults results, credits that keep the
 * socket's outstanding credits within maxCredits, and `withdraw` never with credits. The first problem
 * is returned, naming the field.
 */
export function checkEnvelope(
  value: unknown,
  outstanding: number,
  limits: EnvelopeLimits,
  shape: RequestShape = CHANNEL_MESSAGE,
): Checked<ChannelEnvelope> {
  const problem = shape.check(value);
  if (problem) return problem;
  const obj = value as Partial<ChannelEnvelope>;
  const results = obj.results ?? [];
  if (results.length > limits.maxResults)
    return new Problem('invalid_body', `results must be an array of 0 to ${limits.maxResults} results`);
  const credits = obj.credits ?? 0;
  if (outstanding + credits > limits.maxCredits)
    return new Problem(
      'invalid_credits',
      `credits would exceed ${limits.maxCredits} outstanding (now ${outstanding}); send fewer`,
    );
  const withdraw = obj.withdraw === true;
  if (withdraw && credits > 0)
    return new Problem('invalid_credits', 'a message withdraws its credits or adds some, not both');
  return { results, credits, withdraw, queues: obj.queues, ref: obj.ref };
}
