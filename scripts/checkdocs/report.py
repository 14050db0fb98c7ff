"""The problems found and the number of checks made, shared by every part."""

problems = []
counted = [0]


def problem(msg):
    problems.append(msg)


def check(ok, msg):
    counted[0] += 1
    if not ok:
        problem(msg)
