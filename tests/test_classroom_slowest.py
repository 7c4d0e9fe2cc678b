"""bench/classroom.py: which moves make the slowest 5%, by hand."""
import classroom_report  # bench/ (pytest's pythonpath)
import classroom_students


def test_the_slowest_twentieth_of_the_moves_with_their_templates_and_when_they_came():
    started = 1000.0
    students = [classroom_students.Student(0, "a"), classroom_students.Student(1, "b")]
    # 40 moves: 38 quick depthwise ones, then two slow tensor-core builds, one in the first minute.
    students[0].timeline = [(started + 70 + i, "depthwise_blog", 0.2, 0.5) for i in range(38)]
    students[1].timeline = [(started + 10, "matmul_tensorcore", 1.4, 3.1),
                            (started + 200, "matmul_tensorcore", 1.1, None)]
    to_code = classroom_report.slowest_moves(students, 2, started)
    assert to_code["count"] == 2  # 5% of 40
    assert to_code["templates"] == [("matmul_tensorcore", 2)] and to_code["in_first_minute"] == 1
    assert to_code["templates_of_all"] == [("depthwise_blog", 38), ("matmul_tensorcore", 2)]
    to_latency = classroom_report.slowest_moves(students, 3, started)  # a move without a latency is left out
    assert to_latency["count"] == 2 and to_latency["templates"] == [("matmul_tensorcore", 1), ("depthwise_blog", 1)]


def test_a_class_without_moves_has_no_slowest():
    assert classroom_report.slowest_moves([classroom_students.Student(0, "a")], 2, 0.0)["count"] == 0
