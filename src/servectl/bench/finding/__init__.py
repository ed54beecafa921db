"""Findings: publishable evidence whose every number is a claim recomputed from the raw artifacts it carries.

- :func:`~servectl.bench.finding.report.write_report` (`servectl report`) writes a finding folder.
- :func:`~servectl.bench.finding.verify.verify_finding` (`servectl claims verify`) recounts it.
- :mod:`~servectl.bench.finding.ledger` (the claim format), :mod:`~servectl.bench.finding.build` (claims from
  artifacts), :mod:`~servectl.bench.finding.render` (README and short post), :mod:`~servectl.bench.finding.publish`
  (redaction and size limits).
"""
