// Prints, as JSON, what @huggingface/hub's scanCacheDir (its port of huggingface_hub's
// scan_cache_dir) reads from a hub cache: each repository, its revisions with their refs, and
// each snapshot file with the blob it resolves to. The hub package's tests compare it with the
// cache they wrote. Usage: node hub_scan.mjs CACHE_DIR
import { scanCacheDir } from "@huggingface/hub";
import { relative } from "node:path";

const info = await scanCacheDir(process.argv[2]);
const byName = (a, b) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0);
console.log(JSON.stringify({
  warnings: info.warnings.map(String),
  repos: info.repos.map((r) => ({
    id: r.id.name,
    type: r.id.type,
    filesCount: r.filesCount,
    size: r.size,
    revisions: r.revisions.map((v) => ({
      commit: v.commitOid,
      refs: [...v.refs].sort(),
      files: v.files
        .map((f) => ({ path: relative(v.path, f.path), blob: relative(r.path, f.blob.path), size: f.blob.size }))
        .sort(byName),
    })),
  })),
}));
