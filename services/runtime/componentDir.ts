// The component's own directory: where package.json, config.yaml and web/ are. This file compiles to
// dist/services/runtime/componentDir.js, three levels below it. (No Harper import: unit tests load it.)
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

export const componentDir = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..', '..');
