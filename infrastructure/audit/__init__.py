"""Audits of one run: its timeline, its verification against the stored read models, and
export bundles an auditor checks offline (DESIGN.md "Audit")."""
