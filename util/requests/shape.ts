// A request value against its shape in docs/openapi.yaml, the one description of every request body:
// the build compiles the document's request schemas to code (scripts/request-shapes.mjs writes
// dist/util/requests/shapes.js), and this turns a failed check into one Problem that names the field.
// What a schema cannot say (a byte limit after normalising, a lone surrogate, a rule across fields, a
// bound from the configuration) stays a small named check after the shape, in the caller.
import { Problem, type ProblemCode } from '../problem.js';
import { describeType, echo } from '../text.js';
import { fields as shapeFields, shapes } from './shapes.js';

/** The part of a JSON Schema the answer reads to say what a field must be. */
export interface SchemaNode {
  type?: string | string[];
  /** A documented phrase for what the field must be, used as it stands ("the token the claim returned"). */
  title?: string;
  enum?: unknown[];
  minimum?: number;
  maximum?: number;
  minLength?: number;
  maxLength?: number;
  minItems?: number;
  maxItems?: number;
  pattern?: string;
  properties?: Record<string, SchemaNode>;
}

/** One failure as the compiled shape reports it (it runs with every error, and verbose). */
export interface ShapeError {
  keyword: string;
  instancePath: string;
  params: Record<string, unknown>;
  /** The schema that holds the failing keyword. */
  parentSchema?: SchemaNode;
  /** The value that failed. */
  data?: unknown;
}

export interface ShapeValidator {
  (data: unknown): boolean;
  errors?: ShapeError[] | null;
}

/** A request shape by its document name, and what a refusal calls the value as a whole. */
export interface RequestShape {
  /** The first problem of `value`, or null when it has the documented shape. */
  check(value: unknown): Problem | null;
  /** The top-level fields the document names (an open shape passes others through). */
  readonly fields: ReadonlySet<string>;
}

/**
 * The shape `name` of the document: an operationId, `<operationId>$<field>` for the items of an array
 * the document marks `x-per-item`, or `openChannel$message`. `what` names the value in an answer ("the
 * body", "the result"); `codes` gives a top-level field its own code (`limit` → `invalid_limit`);
 * everything else is `invalid_body`, and a field outside a closed list `unknown_field`. A name the
 * document lacks throws when the module that asks for it loads, so a renamed operation fails at once.
 */
export function requestShape(
  name: string,
  what: string,
  codes: Readonly<Record<string, ProblemCode>> = {},
  validators: Readonly<Record<string, ShapeValidator>> = shapes,
  fieldLists: Readonly<Record<string, readonly string[]>> = shapeFields,
): RequestShape {
  const validate = validators[name];
  if (validate === undefined) throw new Error(`docs/openapi.yaml has no request shape ${name}`);
  return {
    fields: new Set(fieldLists[name] ?? []),
    check(value: unknown): Problem | null {
      if (validate(value)) return null;
      const e = pick(validate.errors ?? []);
      if (e === undefined)
        return new Problem('invalid_body', `the ${what} does not have its documented shape`);
      return refusal(e, what, codes);
    },
  };
}

const segments = (path: string): string[] =>
  path === ''
    ? []
    : path
        .slice(1)
        .split('/')
        .map((s) => s.replace(/~1/g, '/').replace(/~0/g, '~'));

/** Where a failure is, with a `required` one placed at the missing field. */
function pathOf(e: ShapeError): string[] {
  const at = segments(e.instancePath);
  return e.keyword === 'required' ? [...at, String(e.params.missingProperty)] : at;
}

/**
 * The failure to answer with: a field outside a closed body first (the field list is the first thing a
 * body is held to), then the deepest failure, so `error.name` is named rather than `error`; at one depth
 * a oneOf or anyOf failure, whose schema describes the whole field, rather than one of its branches.
 */
function pick(errors: readonly ShapeError[]): ShapeError | undefined {
  const closed = errors.find((e) => e.keyword === 'additionalProperties' && e.instancePath === '');
  if (closed) return closed;
  let best: ShapeError | undefined;
  let bestDepth = -1;
  for (const e of errors) {
    const depth = pathOf(e).length;
    const combinator = e.keyword === 'oneOf' || e.keyword === 'anyOf';
    if (depth > bestDepth || (depth === bestDepth && combinator && best?.instancePath === e.instancePath)) {
      best = e;
      bestDepth = depth;
    }
  }
  return best;
}

/** `error.name`, `targets[3].url`, `headers["content-type"]`: a path as a reader writes it. */
function fieldName(path: readonly string[]): string {
  return path
    .map((s, i) =>
      /^\d+$/.test(s) ? `[${s}]` : !/^[A-Za-z_$][\w$]*$/.test(s) ? `[${echo(s)}]` : i === 0 ? s : `.${s}`,
    )
    .join('');
}

const TYPE_WORDS: Readonly<Record<string, string>> = {
  integer: 'an integer',
  number: 'a number',
  string: 'a string',
  boolean: 'true or false',
  object: 'an object',
  array: 'an array',
};

function span(min: number | undefined, max: number | undefined, unit: string): string {
  if (min !== undefined && max !== undefined) return ` of ${min} to ${max}${unit}`;
  if (min !== undefined) return ` of at least ${min}${unit}`;
  if (max !== undefined) return ` of at most ${max}${unit}`;
  return '';
}

/** What a field must be, read from its schema: its title when it has one, else its type and bounds. */
export function expectation(s: SchemaNode | undefined): string {
  if (s === undefined) return 'as documented';
  if (s.title) return s.title;
  if (s.enum) return `one of ${s.enum.filter((v) => v !== null).join(', ')}`;
  const types = (Array.isArray(s.type) ? s.type : s.type ? [s.type] : []).filter((t) => t !== 'null');
  let text = types.map((t) => TYPE_WORDS[t] ?? t).join(' or ') || 'as documented';
  text +=
    s.minimum !== undefined && s.maximum !== undefined
      ? ` from ${s.minimum} to ${s.maximum}`
      : span(s.minimum, s.maximum, '');
  text += span(s.minLength, s.maxLength, ' characters') + span(s.minItems, s.maxItems, ' items');
  if (s.pattern) text += ` matching ${s.pattern}`;
  return text;
}

/** A schema of an object (a body, a target), as opposed to an item of another type (a URL of a list). */
function isObjectSchema(s: SchemaNode | undefined): boolean {
  return s?.type === 'object' || (Array.isArray(s?.type) && s.type.includes('object'));
}

/** The value as an answer shows it: a short quoted string, a number, or its type. */
function shown(v: unknown): string {
  if (typeof v === 'string') return echo(v);
  if (typeof v === 'number') return String(v);
  return describeType(v);
}

function refusal(e: ShapeError, what: string, codes: Readonly<Record<string, ProblemCode>>): Problem {
  const path = pathOf(e);
  if (e.keyword === 'additionalProperties') {
    const where = path.length === 0 ? `the ${what}` : fieldName(path);
    return new Problem(
      path.length === 0 ? 'unknown_field' : (codes[path[0]!] ?? 'invalid_body'),
      `unknown field ${echo(e.params.additionalProperty)} in ${where}`,
    );
  }
  const code = (path.length > 0 && codes[path[0]!]) || 'invalid_body';
  if (path.length === 0)
    return new Problem(
      code,
      e.keyword === 'type'
        ? `the ${what} must be ${isObjectSchema(e.parentSchema) ? 'a JSON object' : expectation(e.parentSchema)}, not ${describeType(e.data)}`
        : `the ${what} must be ${expectation(e.parentSchema)}`,
    );
  if (e.keyword === 'required') {
    const schema = e.parentSchema?.properties?.[path[path.length - 1]!];
    return new Problem(code, `${fieldName(path)} must be ${expectation(schema)}, not missing`);
  }
  // A wrong type is named by its type; a right type out of bounds by its value.
  const was = e.keyword === 'type' ? describeType(e.data) : shown(e.data);
  return new Problem(code, `${fieldName(path)} must be ${expectation(e.parentSchema)}, not ${was}`);
}
