// The persistent channel's message envelope (docs/fleets.md, "The persistent channel"): what a fleet may send
// on `/render_queue/channel`, checked whole before anything is applied, so a bad message changes nothing.
// Pure: the route module (services/http/routes/channel.ts) parses the JSON and applies what this admits.
import { badRequest, echo } from '../http/errors.js';
import { describeType, requireObject } from '../http/input.js';

/** The fields a channel message may carry; any other is refused as unknown (the envelope is closed). */
export const CHANNEL_FIELDS = ['results', 'credits', 'withdraw', 'queues', 'ref'] as const;

/** A `ref` is echoed in the answer: a short string or an integer, nothing a client could grow. */
const MAX_REF_CHARS = 200;

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
  /** The raw `queues` narrowing: undefined keeps the socket's scope, null resets it to all. */
  queues: unknown;
  ref: string | number | undefined;
}

/**
 * Checks a parsed message against the envelope: an object of known fields; `results` an array of at
 * most maxResults (each result is checked on its own later, as in `job_results`); `credits` a
 * non-negative integer that keeps the socket's outstanding credits within maxCredits; `withdraw` a
 * boolean, never with credits; `ref` a string or a safe integer. Throws a 400 HttpError naming the first problem.
 */
export function checkEnvelope(value: unknown, outstanding: number, limits: EnvelopeLimits): ChannelEnvelope {
  const obj = requireObject(value, CHANNEL_FIELDS, 'message');
  const results = obj.results ?? [];
  if (!Array.isArray(results) || results.length > limits.maxResults)
    throw badRequest('invalid_body', `results must be an array of 0 to ${limits.maxResults} results`);
  let credits = 0;
  if (obj.credits !== undefined) {
    const c = obj.credits;
    if (typeof c !== 'number' || !Number.isInteger(c) || c < 0)
      throw badRequest(
        'invalid_credits',
        `credits must be a non-negative integer, not ${typeof c === 'number' ? String(c) : describeType(c)}`,
      );
    if (outstanding + c > limits.maxCredits)
      throw badRequest(
        'invalid_credits',
        `credits would exceed ${limits.maxCredits} outstanding (now ${outstanding}); send fewer`,
      );
    credits = c;
  }
  if (obj.withdraw !== undefined && typeof obj.withdraw !== 'boolean')
    throw badRequest('invalid_body', `withdraw must be a boolean, not ${describeType(obj.withdraw)}`);
  const withdraw = obj.withdraw === true;
  if (withdraw && credits > 0)
    throw badRequest('invalid_credits', 'a message withdraws its credits or adds some, not both');
  const ref = obj.ref;
  if (
    ref !== undefined &&
    !(typeof ref === 'string' && ref.length <= MAX_REF_CHARS) &&
    !(typeof ref === 'number' && Number.isSafeInteger(ref))
  )
    throw badRequest(
      'invalid_body',
      `ref must be a string of at most ${MAX_REF_CHARS} characters or an integer, not ${typeof ref === 'string' ? 'a longer string' : echo(ref)}`,
    );
  return { results, credits, withdraw, queues: obj.queues, ref: ref as string | number | undefined };
}
