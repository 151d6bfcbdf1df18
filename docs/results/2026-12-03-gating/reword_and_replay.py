# The change under test: process_record's description is reworded.
import sys

from skillstate.cli import main
from skillstate.eval.families import records

original = records._skill_library


def reworded(task):
    skills = original(task)
    skills["process_record"].description = "Process the next record (reworded)."
    return skills


records._skill_library = reworded
main(["eval", "--replay", *sys.argv[1:]])
