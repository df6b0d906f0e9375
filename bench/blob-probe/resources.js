// POST /probe {op, db?, table, id, body?, note?, expect?}: put (a fresh Blob, or the String), patch
// (note only), delete, get (what a reader sees), raw (the stored record's size and flags) and stats
// (blob files, database files, audit entries). GET /probe/?id= serves a BlobPage as a Response.
import harperdb, { Resource, databases } from 'harperdb';
import { existsSync, readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';

const transaction = harperdb.transaction;

function walk(dir) {
  const out = { files: 0, bytes: 0, names: [] };
  if (!existsSync(dir)) return out;
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = join(dir, e.name);
    if (e.isDirectory()) {
      const r = walk(p);
      out.files += r.files;
      out.bytes += r.bytes;
      out.names.push(...r.names);
    } else {
      out.files++;
      out.bytes += statSync(p).size;
      out.names.push(p.split('/blobs/')[1]);
    }
  }
  return out;
}

export class probe extends Resource {
  static loadAsInstance = false;

  async get(target) {
    const id = target.get('id');
    if (!id)
      return {
        createBlobExported: typeof harperdb.createBlob,
        createBlobGlobal: typeof globalThis.createBlob,
      };
    const page = await databases.probe.BlobPage.get(id);
    if (!page) return undefined;
    return new Response(page.body.stream(), {
      headers: { 'content-type': `${page.body.type}; charset=utf-8` },
    });
  }

  async post(_target, d) {
    const T = databases[d.db ?? 'probe'][d.table];
    switch (d.op) {
      case 'put': {
        const body =
          d.table === 'StrPage' ? d.body : createBlob(Buffer.from(d.body, 'utf8'), { type: 'text/html' });
        await transaction((txn) => T.put(d.id, { id: d.id, note: d.note, body }, txn));
        return { ok: true };
      }
      case 'patch':
        await transaction((txn) => T.patch(d.id, { note: d.note }, txn));
        return { ok: true };
      case 'delete':
        await transaction((txn) => T.delete(d.id, txn));
        return { ok: true };
      case 'get': {
        const r = await T.get(d.id);
        if (!r) return { missing: true };
        try {
          const text = typeof r.body === 'string' ? r.body : await r.body.text();
          return {
            kind: r.body?.constructor?.name,
            size: r.body?.size,
            type: r.body?.type,
            same: text === d.expect,
          };
        } catch (e) {
          return { error: String(e) };
        }
      }
      case 'raw': {
        const e = T.primaryStore.getEntry(d.id);
        return { recordBytes: T.primaryStore.getBinaryFast(d.id)?.length, flags: e?.metadataFlags };
      }
      case 'stats': {
        const root = process.env.ROOTPATH;
        let entries = 0;
        let bytes = 0;
        if (T.auditStore)
          for (const { value } of T.auditStore.getRange({ start: 1, snapshot: false })) {
            entries++;
            bytes += value.length;
          }
        const dbDir = join(root, 'database');
        return {
          blobs: walk(join(root, 'blobs')),
          databaseFiles: Object.fromEntries(
            readdirSync(dbDir).map((f) => [f, statSync(join(dbDir, f)).size]),
          ),
          auditEntries: entries,
          auditBytes: bytes,
          tableAudit: T.audit,
          tableReplicate: T.replicate,
        };
      }
    }
    return { error: 'unknown op' };
  }
}
