// Prints the README's configuration table from the config schema (run after `npm run build`).
import { configTableMarkdown } from '../dist/util/config/schema.js';
console.log(configTableMarkdown());
