"""An S3-compatible server for the tests: moto on a free loopback port, with access checked.

Starts `moto_server`, makes a user allowed everything and one allowed nothing (moto checks
credentials once its first five unauthenticated calls, these, are spent), makes the tests'
bucket, and prints the environment the tests read, as shell assignments. The server runs until
the process whose id is printed as MOTO_PID is killed.
"""

import os
import socket
import subprocess
import sys
import time

import boto3

SETUP_CALLS = 5  # create_user, put_user_policy, create_access_key, create_user, create_access_key
BUCKET = "kahuna-test"

with socket.socket() as probe:
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
endpoint = f"http://127.0.0.1:{port}"
log = open(os.environ.get("MOTO_LOG", os.devnull), "w")
server = subprocess.Popen(
    [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
    env=dict(os.environ, INITIAL_NO_AUTH_ACTION_COUNT=str(SETUP_CALLS)),
    stdout=log,
    stderr=log,
    start_new_session=True,
)
for _ in range(300):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        break
    except OSError:
        time.sleep(0.1)
else:
    server.kill()
    sys.exit(f"moto_server did not listen on {endpoint} in 30 s")

anyone = dict(endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="setup", aws_secret_access_key="setup")
iam = boto3.client("iam", **anyone)
iam.create_user(UserName="kahuna")
everything = '{"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}'
iam.put_user_policy(UserName="kahuna", PolicyName="everything", PolicyDocument=everything)
allowed = iam.create_access_key(UserName="kahuna")["AccessKey"]
iam.create_user(UserName="outsider")
denied = iam.create_access_key(UserName="outsider")["AccessKey"]
s3 = boto3.client(
    "s3",
    endpoint_url=endpoint,
    region_name="us-east-1",
    aws_access_key_id=allowed["AccessKeyId"],
    aws_secret_access_key=allowed["SecretAccessKey"],
)
s3.create_bucket(Bucket=BUCKET)

for name, value in [
    ("MOTO_PID", server.pid),
    ("AWS_ENDPOINT_URL", endpoint),
    ("AWS_ALLOW_HTTP", "true"),
    ("AWS_REGION", "us-east-1"),
    ("AWS_ACCESS_KEY_ID", allowed["AccessKeyId"]),
    ("AWS_SECRET_ACCESS_KEY", allowed["SecretAccessKey"]),
    ("KAHUNA_TEST_S3", f"s3://{BUCKET}"),
    ("KAHUNA_TEST_S3_DENIED_KEY_ID", denied["AccessKeyId"]),
    ("KAHUNA_TEST_S3_DENIED_SECRET", denied["SecretAccessKey"]),
]:
    print(f"export {name}={value}")
