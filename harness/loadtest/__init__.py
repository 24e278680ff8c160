"""Load tests for multi-model endpoints, modelled on SageMaker Inference Recommender jobs, run
on Locust (``locust_run.run_load``; the engine inside Locust is ``locust_engine``)."""
