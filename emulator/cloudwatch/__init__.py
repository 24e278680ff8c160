"""CloudWatch on the emulator's port over the emulator's own metrics: ``series`` (samples,
bounded retention), ``statistics``, ``service`` (the read API and PutMetricData), ``alarms``
(every alarm, its state, evaluation and actions; deployments watch it too) with
``alarm_model`` (an alarm, a history item), ``alarm_db`` (where they are kept), ``compiled``
(their rules and metric math, parsed once) and ``due`` (when each is evaluated next),
``alarm_api`` (the alarm operations and PutMetricData) with ``alarm_checks``, ``names`` and
``paging``, ``wire`` (rpc-v2-cbor, JSON 1.0, query) and ``benchmark`` (what 10,000 alarms
cost: ``python -m emulator.cloudwatch.benchmark``). Its HTTP binding is
``emulator/routes/cloudwatch.py``.

The package imports none of them: ``statistics`` (the one percentile) loads no web framework."""
