"""``python -m hvd.spark.agent_ssh``: the old name of
``python -m hvd._driver.agent_ssh`` (the agents' ssh stand-in, shared by
hvd.spark and hvd.ray)."""
import sys

from hvd._driver import agent_ssh

if __name__ == '__main__':
    agent_ssh.main(sys.argv[1:])
