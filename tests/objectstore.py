"""Helpers for tests against moto's S3 server (the ``s3_endpoint`` fixture)."""


S3_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                  "AWS_DEFAULT_REGION": "us-east-1"}


def new_bucket(endpoint: str) -> str:
    """A fresh bucket on the moto endpoint (its name)."""
    import uuid

    import boto3

    name = f"dynabench-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="testing",
                 aws_secret_access_key="testing").create_bucket(Bucket=name)
    return name
