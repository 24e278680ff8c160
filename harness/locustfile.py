"""A SageMaker multi-model endpoint load test for plain Locust: ``locust -f harness/locustfile.py``.

The same engine ``mme loadtest`` runs (``harness/loadtest/locust_engine.py``): the plan's phases
as a ``LoadTestShape``, boto3 ``InvokeEndpoint`` users spread over the TargetModels by their
popularity, Inference Recommender's stopping conditions, and the MME report when it ends.
Write the plan once with ``mme loadtest ... --write-spec plan.json``, then, for teams that live
in Locust (its web UI, its master/worker flags, its Kubernetes charts)::

    locust -f harness/locustfile.py --mme-plan plan.json --mme-report report/   # web UI
    locust -f harness/locustfile.py --mme-plan plan.json --mme-report report/ --headless
    locust -f harness/locustfile.py --master --mme-plan plan.json --mme-report report/
    locust -f harness/locustfile.py --worker --master-host HOST   # the plan comes from the master

Needs this project installed (``pip install 'mme[harness]'``): the engine and the report are its.
"""

from harness.loadtest.locust_engine import PlanShape, SageMakerUser

__all__ = ["PlanShape", "SageMakerUser"]
