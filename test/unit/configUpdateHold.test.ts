import { test } from 'node:test';
import assert from 'node:assert/strict';
import { MAX_CONFIG_UPDATE_HOLD_MS, parseConfigUpdateHold } from '../../util/config/updateHold.js';

test('the config update hold is off unless the environment names a positive number of ms, capped', () => {
  assert.deepEqual(
    [undefined, '', ' ', '0', '-5', 'abc', 'NaN'].map(parseConfigUpdateHold),
    [0, 0, 0, 0, 0, 0, 0],
  );
  assert.equal(parseConfigUpdateHold('300'), 300);
  assert.equal(parseConfigUpdateHold('12.7'), 12);
  assert.equal(parseConfigUpdateHold('999999'), MAX_CONFIG_UPDATE_HOLD_MS);
});
