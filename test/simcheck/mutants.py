#!/usr/bin/env python3
"""Checks that the engine's simulation finds the bugs it is meant to find.

Each mutant introduces, in a scratch copy of the repository, one protocol
bug of the kind that breaks "acknowledged means forever" (a zombie's late
commit, a drop that fences nothing, ...), expressed in the engine's
protocol. For each, the
simulation runs with its `make test` budget (2,000 seeds); a mutant it does
not kill is a hole in the simulator. The script prints, per mutant, the
first seed that failed and how long the simulation took to find it.

    python3 test/simcheck/mutants.py            # all mutants
    python3 test/simcheck/mutants.py 01 05      # some

Only the standard library is used. Exit status 1 if any mutant survives.
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# (name, the bug it introduces, file, old text, new text)
MUTANTS = [
    ("01-zombie-commits", "a zombie's late segment acknowledged into a generation it no longer owns",
     "engine/head.go", "\t\topts.IfMatch = prev.etag\n", "\t\t_ = prev.etag // no condition: any writer's swap wins\n"),
    ("02-drop-fences-nothing", "a drop elsewhere leaves this process's writer acknowledging into the dropped table",
     "engine/registry.go", "\t\tr.Version++\n\t\tr.Dropped = true\n", "\t\treturn nil // the drop fences nothing\n\t\tr.Version++\n\t\tr.Dropped = true\n"),
    ("03-pinned-from-cache", "a pinned read served from this process's cache after another process collected the version",
     "engine/read.go", "func (t *Table) pinnedSnapshot(ctx context.Context, v uint64) (*snapshot, error) {\n",
     "func (t *Table) pinnedSnapshot(ctx context.Context, v uint64) (*snapshot, error) {\n\tif s, ok := t.pinned.Get(v); ok {\n\t\treturn s, nil // from the cache, unchecked\n\t}\n"),
    ("04-scan-without-recovery", "a scan with payloads fails when a generation it lists is reclaimed under it",
     "engine/list.go", "\tif !errors.Is(err, objstore.ErrNotFound) || opts.Version > 0 {\n\t\treturn rec, err\n\t}\n", "\treturn rec, err\n"),
    ("05-unbounded-reopen", "a payload body failing midway is reopened without bound",
     "engine/read.go", "\tif p.attempts >= maxRetries {\n", "\tif p.attempts -= 1; false {\n"),
    ("06-seal-drops-a-segment", "a seal excludes a segment readers were already shown",
     "engine/writer.go", "\t\ths, err := casHead(ctx, t.db, t.keys, w.shard, h, h.sealedBy(w.id))\n",
     "\t\ths, err := casHead(ctx, t.db, t.keys, w.shard, h, head{Gen: h.Gen, Segs: max(h.Segs, 1) - 1, Sealed: true, Owner: w.id, Rows: h.Rows, GenStart: h.GenStart})\n"),
    ("07-shared-key-space", "a re-created table shares keys with the dropped one (a paused merge commits into it)",
     "engine/keyspace/keyspace.go", "\treturn Inc{table: t.name, inc: inc, root: t.name + \"/\" + inc + \"/\"}, nil\n",
     "\treturn Inc{table: t.name, inc: inc, root: t.name + \"/i0000000000000000000000/\"}, nil\n"),
    ("08-reuse-generation", "a new owner reuses the generation of the writer it replaces",
     "engine/takeover.go", "\t\tif !h.Sealed {\n\t\t\tif err := t.db.point(ctx, hookBeforeFence); err != nil {\n",
     "\t\tif !h.Sealed {\n\t\t\tif nh, err := casHead(ctx, t.db, t.keys, w.shard, h, head{Gen: h.Gen, Segs: h.Segs, Owner: w.id}); err == nil {\n\t\t\t\tw.open(nh)\n\t\t\t\tw.head = nh\n\t\t\t\treturn nil\n\t\t\t}\n\t\t\tif err := t.db.point(ctx, hookBeforeFence); err != nil {\n"),
    ("09-seal-cache-shared", "a handle of a dropped incarnation serves a cached seal record for the new one",
     "engine/seal.go", "\tkey := t.keys.Seal(shard, gen)\n\treturn t.db.seals.GetOrLoad(ctx, key,",
     "\tkey := t.keys.Seal(shard, gen)\n\treturn t.db.seals.GetOrLoad(ctx, fmt.Sprint(shard, gen),"),
    ("10-refresh-no-retry", "a refresh whose newest version was collected before it loaded fails the reads that joined it",
     "engine/snapshot.go", "\tfor attempt := 0; attempt < maxRefreshAttempts; attempt++ {\n", "\tfor attempt := 0; attempt < 1; attempt++ {\n"),
    ("11-merge-skips-a-generation", "a merge plan with a gap moves the watermark over an unmerged generation",
     "engine/merge.go", "\t\t\tg := wm + 1 + uint64(i)\n", "\t\t\tg := wm + 1 + uint64(i)\n\t\t\tif i == 1 {\n\t\t\t\tg++\n\t\t\t}\n"),
    ("12-head-layout-misfiled", "the layout a head carries is taken for the segment after the one it counts",
     "engine/snapshot.go", "db.layouts.Add(t.keys.Segment(name, gen, h.Segs), lay,", "db.layouts.Add(t.keys.Segment(name, gen, h.Segs+1), lay,"),
    ("13-fenced-owner-deregisters", "a fenced owner's late registry update removes its successor: the shard looks idle while it commits",
     "engine/registry.go", "\t\t\tif x.Name == writer || (only && x.Gen < gen) {\n", "\t\t\tif x.Name == writer || only {\n"),
    ("14-ack-into-unowned-partition", "a process acknowledges appends of partitions it does not own, into a shard of its own (as in a table without partitions): two pods receiving one id both acknowledge",
     "engine/writer.go", "\t\t\tif !o.Self {\n\t\t\t\treturn nil, &NotOwnerError{Owner: o}\n\t\t\t}\n",
     "\t\t\tif !o.Self {\n\t\t\t\tshard = t.db.cfg.Shard // not its partition: into its own shard instead of refusing\n\t\t\t\tbreak\n\t\t\t}\n"),
    ("15-handover-skips-seal", "a new owner claims the next generation without sealing (fencing) the previous owner's open one: a commit of the old owner racing the claim is left out of the seal record",
     "engine/takeover.go", "\t\tif !h.Sealed {\n\t\t\tif err := t.db.point(ctx, hookBeforeFence); err != nil {\n",
     "\t\tif !h.Sealed {\n\t\t\th.Sealed = true // not fenced: the seal record is built from the count read\n\t\t}\n\t\tif false {\n\t\t\tif err := t.db.point(ctx, hookBeforeFence); err != nil {\n"),
    ("16-read-retry-keeps-first-record", "a payload body resumed after its file vanished reads the row's new file at the first attempt's span",
     "engine/read.go", "\t\tp.from(loc)\n\t\trc, err := t.openSpan(ctx, p.span, p.Offset+p.read, p.Length-p.read)\n",
     "\t\tp.span.key = spanOf(loc).key // the first attempt's offset, in the new file\n\t\trc, err := t.openSpan(ctx, p.span, p.Offset+p.read, p.Length-p.read)\n"),
    ("17-feed-skips-rest-of-generation", "a feed reader that stood inside a generation when it was sealed (a hand-over to a new owner, or a rotation) moves on to the next one: the segments committed since its last read are skipped",
     "engine/feed.go", "\t\tif pos.Gen == h.Gen {\n\t\t\tn, first = h.Segs, h.GenStart\n\t\t} else {\n",
     "\t\tif pos.Gen == h.Gen {\n\t\t\tn, first = h.Segs, h.GenStart\n\t\t} else if pos.Seg > 1 {\n\t\t\tn = 0 // sealed since: on to the next generation\n\t\t} else {\n"),
    ("18-group-commit-unfenced", "a consumer-group member's commit is accepted after its partitions were handed over to another member: both commit the same rows",
     "engine/consumers.go", "\tif c.Group != group || c.Epoch != g.Epoch {\n",
     "\treturn nil // any member's cursor is taken\n\tif c.Group != group || c.Epoch != g.Epoch {\n"),
]


def run(selected):
    survivors = []
    for name, what, path, old, new in MUTANTS:
        if selected and not any(name.startswith(s) for s in selected):
            continue
        scratch = tempfile.mkdtemp(prefix="rollstore-mutant-")
        try:
            shutil.copytree(ROOT, os.path.join(scratch, "repo"), symlinks=True,
                            ignore=shutil.ignore_patterns(".git", "node_modules", ".state", "bin", "data"))
            repo = os.path.join(scratch, "repo")
            target = os.path.join(repo, path)
            src = open(target).read()
            if src.count(old) != 1:
                print(f"{name}: the code it mutates changed ({path}); update the mutant")
                survivors.append(name)
                continue
            open(target, "w").write(src.replace(old, new))
            start = time.time()
            proc = subprocess.run(["go", "test", "-count=1", "-run", "TestSimulation$", "./engine/", "-sim.seeds=2000"],
                                  cwd=repo, capture_output=True, text=True, timeout=900)
            took = time.time() - start
            out = proc.stdout + proc.stderr
            seeds = re.findall(r"seed (\d+): ", out)
            if proc.returncode == 0 or not seeds:
                build = "build failed: " + out[-400:] if "build failed" in out or "cannot" in out else ""
                print(f"{name}: SURVIVED ({what}) {build}")
                survivors.append(name)
                continue
            first = re.search(r"seed \d+: (.*)", out)
            print(f"{name}: killed in {took:.0f}s, seeds {', '.join(seeds[:3])} — {what}\n    {first.group(1)[:160] if first else ''}")
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    return survivors


if __name__ == "__main__":
    survivors = run(sys.argv[1:])
    if survivors:
        print("survivors:", ", ".join(survivors))
        sys.exit(1)
