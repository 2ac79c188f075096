/*
 * sg_test.h — the one include every unit test starts with: cmocka and its
 * prerequisites in the order cmocka requires, plus small helpers.
 */
#ifndef SG_TEST_H
#define SG_TEST_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <errno.h>
#include <string.h>

#include <cmocka.h>

/* Doubles equal within eps (cmocka compares integers only). */
#define assert_near(a, b, eps) do {					\
	double a_ = (a), b_ = (b);					\
	if (!(a_ - b_ <= (eps) && b_ - a_ <= (eps)))			\
		fail_msg("%s = %.17g, expected %.17g (±%g)", #a, a_, b_,	\
		    (double)(eps));					\
} while (0)

#endif /* SG_TEST_H */
