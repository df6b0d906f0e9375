// The page store: the only module that reads or writes RenderedPage (test/unit/tableOwners). A
// `rendered` result's body is stored here, keyed by the target URL.
import { table, transaction } from './harper.js';

export interface PageWrite {
  url: string;
  statusCode: number | null;
  contentType: string | null;
  body: string;
  renderedAt: number;
}

function pages() {
  return table('render_queue', 'RenderedPage');
}

/** Stores rendered pages (one transaction for the lot), replacing any earlier page of each URL. */
export async function storePages(list: PageWrite[]): Promise<void> {
  if (list.length === 0) return;
  await transaction(async (txn) => {
    const t = pages();
    for (const p of list)
      await t.put(
        p.url,
        {
          id: p.url,
          url: p.url,
          statusCode: p.statusCode,
          contentType: p.contentType,
          body: p.body,
          renderedAt: p.renderedAt,
        },
        txn,
      );
  });
}
