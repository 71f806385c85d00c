#!/usr/bin/env python3
"""Checks that every relative link in README.md, BENCHMARKS.md and docs/*.md resolves inside the repo
(run: python3 test/doclinks/doclinks.py),
including #anchors into markdown files (GitHub's slug rules, approximately)."""
import os, re, sys, glob
root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), '..', '..'))
files = ['README.md', 'BENCHMARKS.md'] + sorted(os.path.relpath(p, root) for p in glob.glob(os.path.join(root, 'docs/*.md')))
def slug(h):
    h = h.strip().lower()
    h = re.sub(r'[`*_~]', '', h)
    h = re.sub(r'[^\w\- ]', '', h, flags=re.U)
    return h.replace(' ', '-')
def anchors(path):
    out, fence = set(), False
    for line in open(path, encoding='utf-8'):
        if line.startswith('```'):
            fence = not fence
        if not fence and line.startswith('#'):
            out.add(slug(line.lstrip('#')))
    return out
bad = 0
for f in files:
    text = open(os.path.join(root, f), encoding='utf-8').read()
    text = re.sub(r'```.*?```', '', text, flags=re.S)
    for m in re.finditer(r'\]\(([^)\s]+)\)', text):
        link = m.group(1)
        if re.match(r'^[a-z]+:', link):
            continue
        path, _, frag = link.partition('#')
        target = os.path.normpath(os.path.join(root, os.path.dirname(f), path)) if path else os.path.join(root, f)
        if not (target + os.sep).startswith(root + os.sep) or not os.path.exists(target):
            print(f'{f}: {link}: no such file inside the repo'); bad += 1; continue
        if frag and target.endswith('.md') and frag not in anchors(target):
            print(f'{f}: {link}: no heading #{frag}'); bad += 1
print(f'{len(files)} files checked, {bad} broken links')
sys.exit(1 if bad else 0)
