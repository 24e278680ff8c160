"""Faults a test asks for: rules that make chosen calls fail or slow down as SageMaker's do.

``rules`` reads and checks a rule (``POST /_emulator/faults``); ``table`` keeps the rules in
force and answers, for each call, whether one fires. What a fired fault does to a call is done
where the call is answered (``hosting/endpoint.py`` for InvokeEndpoint, each service's route for
the other APIs), in that API's own error shape. docs/faults.md is the user's guide.
"""
