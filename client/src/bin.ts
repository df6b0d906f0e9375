#!/usr/bin/env node
// The `queue-keeper-fleet` command (see cli.ts).
import { main } from './cli.js';

process.exitCode = await main(process.argv.slice(2));
