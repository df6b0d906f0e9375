// The request shapes compiled from docs/openapi.yaml by scripts/request-shapes.mjs into
// dist/util/requests/shapes.js at build time; this declares what that module exports.
import type { ShapeValidator } from './shape.js';

/** Every operation's JSON body by operationId, and `<operationId>$<field>` for items checked one by one. */
export declare const shapes: Readonly<Record<string, ShapeValidator>>;

/** The top-level fields each shape names, by the same names. */
export declare const fields: Readonly<Record<string, readonly string[]>>;
